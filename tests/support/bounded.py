"""A call that may hang, run where the test can give up on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def call_bounded(call: Callable[[], Any], limit: float) -> tuple[float | None, BaseException | None]:
    """Runs ``call`` in a daemon thread for at most ``limit`` seconds: (seconds it took, or None if
    it was still running; the exception it raised, if any)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # reported to the test
            raised[0] = exc

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    return (None if thread.is_alive() else time.monotonic() - began), raised[0]
