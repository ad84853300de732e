"""Which splits exist and how each is loaded. A bank is loaded on first use and kept: loading
the book split means fetching and parsing the source, which must not happen per request."""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING

from app.tasks.base import Bank, Task, UnknownTask

if TYPE_CHECKING:
    from app.settings import Settings

# split name -> "module:function" taking Settings and returning a Bank. Lazy, so that serving
# the synthetic split never imports JAX or touches the network.
SPLIT_LOADERS: dict[str, str] = {
    "synthetic": "app.tasks.synthetic.bank:load_bank",
    "book": "app.tasks.book.bank:load_bank",
    "tasks": "app.tasks.tasks.bank:load_bank",
    "exam": "app.tasks.exam.bank:load_bank",
    "impl": "app.tasks.impl.bank:load_bank",
}


class UnknownSplit(LookupError):
    pass


_banks: dict[str, Bank] = {}
_lock = threading.Lock()


def split_names() -> list[str]:
    return list(SPLIT_LOADERS)


def get_bank(split: str, settings: Settings) -> Bank:
    if split not in SPLIT_LOADERS:
        raise UnknownSplit(split)
    bank = _banks.get(split)
    if bank is not None:
        return bank
    with _lock:
        if split not in _banks:
            module_name, func_name = SPLIT_LOADERS[split].split(":")
            loader = getattr(importlib.import_module(module_name), func_name)
            _banks[split] = loader(settings)
        return _banks[split]


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


def clear_cache() -> None:
    """Forget loaded banks (tests that change settings)."""
    with _lock:
        _banks.clear()
