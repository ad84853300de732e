"""A progress bar on stderr: tqdm when it is installed, else a plain one-line bar."""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol


class Progress(Protocol):
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, text: str) -> None: ...
    def close(self) -> None: ...


class PlainBar:
    """Redrawn in place at most ten times a second, so a fast run does not flood a log."""

    def __init__(self, total: int, desc: str, stream: Any = None) -> None:
        self.total, self.desc, self.done, self.postfix = total, desc, 0, ""
        self.stream = stream or sys.stderr
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= 0.1 or self.done >= self.total:
            self._last = now
            self._draw()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def _draw(self) -> None:
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        self.stream.write(f"\r{self.desc} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{self.postfix}")
        self.stream.flush()

    def close(self) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()


def progress_bar(total: int, desc: str, enabled: bool = True) -> Progress:
    if enabled:
        try:
            from tqdm import tqdm  # optional (the eval extra): a plain bar without it

            return tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            pass
        return PlainBar(total, desc)
    return PlainBar(total, desc, stream=_Null())


class _Null:
    def write(self, _: str) -> None:
        pass

    def flush(self) -> None:
        pass
