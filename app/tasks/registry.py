"""The banks of the registered splits (app/tasks/splits.py), each loaded on first use and kept:
loading the book split means fetching and parsing the source, which must not happen per request.

A bank is kept per value of the settings its spec says it reads, so a process (or a test) that
grades under other settings gets the bank those settings make, never the first one loaded."""

from __future__ import annotations

import threading
from typing import Any

from app.settings import Settings
from app.tasks.base import Bank, Task, UnknownTask
from app.tasks.splits import UnknownSplit, split_names, split_spec

__all__ = ["UnknownSplit", "get_bank", "resolve_task", "split_names", "split_of"]

# Banks kept per split: one per settings value in use. A process has one; tests switch between a
# few. Past this the oldest goes (it is rebuilt if asked for again).
BANKS_PER_SPLIT = 4

_banks: dict[tuple[str, tuple[Any, ...]], Bank] = {}
_lock = threading.Lock()


def get_bank(split: str, settings: Settings) -> Bank:
    """The split's bank for these settings; UnknownSplit if no split has this name."""
    spec = split_spec(split)
    key = (split, spec.settings_key(settings))
    bank = _banks.get(key)
    if bank is not None:
        return bank
    with _lock:  # one load per key, however many requests ask at once
        bank = _banks.get(key)
        if bank is None:
            bank = spec.load(settings)
            kept = [k for k in _banks if k[0] == split]
            for old in kept[: max(0, len(kept) - BANKS_PER_SPLIT + 1)]:
                del _banks[old]
            _banks[key] = bank
        return bank


def split_of(task_id: str) -> str:
    return task_id.split("/", 1)[0]


def resolve_task(task_id: str, settings: Settings) -> Task:
    """The task a stable id names; UnknownTask for any id that names nothing."""
    split = split_of(task_id)
    try:
        bank = get_bank(split, settings)
    except UnknownSplit:
        raise UnknownTask(task_id) from None
    return bank.get(task_id)
