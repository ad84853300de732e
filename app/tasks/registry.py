"""Which splits exist and how each is loaded. A bank is loaded on first use and kept: loading
the book split means fetching and parsing the source, which must not happen per request."""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.settings import Settings
from app.tasks.base import Bank, Task, UnknownTask

# Each split's bank module is imported when the split is first used, not with the registry: the
# book and exam banks bring the book source's HTTP client and their parsers, which a process
# serving only synthetic tasks never needs.


def _synthetic(settings: Settings) -> Bank:
    from app.tasks.synthetic.bank import load_bank  # first use only (see above)

    return load_bank(settings)


def _book(settings: Settings) -> Bank:
    from app.tasks.book.bank import load_bank  # first use only (see above)

    return load_bank(settings)


def _tasks(settings: Settings) -> Bank:
    from app.tasks.tasks.bank import load_bank  # first use only (see above)

    return load_bank(settings)


def _exam(settings: Settings) -> Bank:
    from app.tasks.exam.bank import load_bank  # first use only (see above)

    return load_bank(settings)


def _impl(settings: Settings) -> Bank:
    from app.tasks.impl.bank import load_bank  # first use only (see above)

    return load_bank(settings)


# split name -> its bank loader
SPLIT_LOADERS: dict[str, Callable[[Settings], Bank]] = {
    "synthetic": _synthetic,
    "synthetic-v2": lambda s: __import__("app.tasks.synthetic.bank", fromlist=["_"]).load_bank_v2(s),
    "book": _book,
    "tasks": _tasks,
    "exam": _exam,
    "impl": _impl,
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
            _banks[split] = SPLIT_LOADERS[split](settings)
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
