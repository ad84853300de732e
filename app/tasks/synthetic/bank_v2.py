"""The ``synthetic-v2`` split's bank module (layout 2 of the synthetic generator; see bank.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.tasks.synthetic.bank import SyntheticBankV2

if TYPE_CHECKING:
    from app.settings import Settings


def load_bank(settings: Settings) -> SyntheticBankV2:
    return SyntheticBankV2()
