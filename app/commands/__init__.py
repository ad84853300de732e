"""CLI subcommands. Each module exposes ``register(subparsers)``, adding its parser and setting
``func(args) -> int`` as the default; app/cli.py lists the modules."""

from __future__ import annotations

import sys

from app.settings import get_settings
from app.tasks.base import Bank
from app.tasks.registry import UnknownSplit, get_bank, split_names


def bank_or_complain(split: str, command: str) -> Bank | None:
    """The split's bank, or None after telling the user the split is unknown (exit code 2)."""
    try:
        return get_bank(split, get_settings())
    except UnknownSplit:
        print(f"{command}: unknown split {split!r}; known: {', '.join(split_names())}", file=sys.stderr)
        return None
