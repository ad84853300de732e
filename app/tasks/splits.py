"""The splits this service serves, one SplitSpec each. Every list of splits derives from here: the
banks the registry loads, /v1/splits, the split a label names, each split's default tolerance and
the held-out default. Adding a split is a bank module and one ``register_split`` call.

This module stays light (the graders read tolerances from it): a spec names its bank module, which
is imported when the split is first used. The book and exam banks bring the book source's HTTP
client and their parsers, which a process serving only synthetic tasks never needs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from pydantic import BaseModel

from app.settings import Settings, Tolerances
from app.tasks.base import Bank

BankFactory = Callable[[Settings], Bank]


class UnknownSplit(LookupError):
    """No split of this name is registered."""


@dataclass(frozen=True, slots=True)
class SplitSpec:
    name: str  # the first segment of its task ids
    load: BankFactory  # builds the bank; called once per distinct value of ``reads``
    tolerance: float  # default relative tolerance of its numeric answers
    docs: str  # the page, and section, that describes it to users (a test checks it exists)
    # The Tolerances field an operator sets to override ``tolerance``; None: not configurable.
    tolerance_setting: str | None = None
    held_out: bool = False  # held out for evaluation unless HELD_OUT__SPLITS says otherwise
    # The settings (dotted names) the bank is built from: the bank cache keeps one bank per value.
    reads: tuple[str, ...] = ()
    _read: Callable[[Settings], tuple[Any, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        getters = [attrgetter(name) for name in self.reads]
        object.__setattr__(self, "_read", lambda settings: tuple(get(settings) for get in getters))

    def settings_key(self, settings: Settings) -> tuple[Any, ...]:
        """The values of the settings its bank depends on (hashable, compared by value)."""
        return self._read(settings)


def bank_module(module: str) -> BankFactory:
    """A factory that imports ``module`` on first use and calls its ``load_bank(settings)``."""

    def load(settings: Settings) -> Bank:
        bank: Bank = importlib.import_module(module).load_bank(settings)
        return bank

    return load


_SPECS: dict[str, SplitSpec] = {}


def register_split(spec: SplitSpec) -> SplitSpec:
    """Add a split; refused loudly (ValueError) if the spec could not work, before a request finds out."""
    if not spec.name or "/" in spec.name or spec.name != spec.name.strip():
        raise ValueError(f"split name {spec.name!r}: must be non-empty, without '/' or spaces around it")
    if spec.name in _SPECS:
        raise ValueError(f"split {spec.name!r} is registered already")
    if not 0 < spec.tolerance < 1:
        raise ValueError(f"split {spec.name!r}: tolerance must lie between 0 and 1")
    if spec.tolerance_setting is not None and spec.tolerance_setting not in Tolerances.model_fields:
        raise ValueError(f"split {spec.name!r}: {spec.tolerance_setting!r} is not a Tolerances field")
    for name in spec.reads:
        _check_setting(spec.name, name)
    _SPECS[spec.name] = spec
    return spec


def _check_setting(split: str, dotted: str) -> None:
    """A name in ``reads`` must be a setting holding a value: a group (a model) would be unhashable,
    and a misspelt name would make every bank the same."""
    model: type[BaseModel] = Settings
    *groups, leaf = dotted.split(".")
    for group in groups:
        annotation = model.model_fields[group].annotation if group in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            raise ValueError(f"split {split!r} reads {dotted!r}, which is not a setting")
        model = annotation
    annotation = model.model_fields[leaf].annotation if leaf in model.model_fields else None
    if annotation is None or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise ValueError(f"split {split!r} reads {dotted!r}, which is not a setting holding a value")


def split_spec(name: str) -> SplitSpec:
    try:
        return _SPECS[name]
    except KeyError:
        raise UnknownSplit(name) from None


def split_names() -> list[str]:
    return list(_SPECS)


def is_split(name: str) -> bool:
    return name in _SPECS


def tolerance_for(split: str, settings: Settings) -> float:
    """The split's default tolerance: the operator's setting if its spec names one and it is set,
    else the spec's own. An unknown split is an error (UnknownSplit), never a silent default."""
    spec = split_spec(split)
    if spec.tolerance_setting is not None:
        configured = getattr(settings.tolerances, spec.tolerance_setting)
        if configured is not None:
            return float(configured)
    return spec.tolerance


def is_held_out(split: str, settings: Settings) -> bool:
    """Whether grades of this split are budgeted and pass/fail only: HELD_OUT__SPLITS if the
    operator set it, else the splits whose spec says so."""
    chosen = settings.held_out.splits
    if chosen is not None:
        return split in chosen
    spec = _SPECS.get(split)
    return spec is not None and spec.held_out


# The settings the book source is read with (mirror, cache, download): the book and exam banks.
BOOK_SOURCE = ("book_cache", "book_mirror", "book_base_url", "book_download_timeout")

register_split(SplitSpec(
    name="synthetic", load=bank_module("app.tasks.synthetic.bank"), docs="docs/splits.md",
    tolerance=0.02, tolerance_setting="synthetic"))
register_split(SplitSpec(
    name="book", load=bank_module("app.tasks.book.bank"), docs="docs/splits.md#book",
    tolerance=0.05, tolerance_setting="book", reads=(*BOOK_SOURCE, "redis_url")))  # + its parsed-bank cache
register_split(SplitSpec(
    name="tasks", load=bank_module("app.tasks.tasks.bank"), docs="docs/grading.md#rows-grading-tasks-split",
    tolerance=1e-9, tolerance_setting="rows", reads=("tolerances.rows",)))  # each task carries it
register_split(SplitSpec(
    name="exam", load=bank_module("app.tasks.exam.bank"), docs="docs/splits.md#held-out-splits",
    tolerance=0.05, tolerance_setting="exam", held_out=True, reads=BOOK_SOURCE))
register_split(SplitSpec(
    name="impl", load=bank_module("app.tasks.impl.bank"), docs="docs/impl.md",
    tolerance=1e-6))  # its exercises' default rtol (app/tasks/impl/spec.py); each may set its own
