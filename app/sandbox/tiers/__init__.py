"""The isolation tiers, one module each in this package (plain.py, bubblewrap.py, gvisor.py),
each holding its ``TIER`` (the protocol of app/sandbox/tier.py). Which tiers exist and how they
rank is one list, ``app.settings.TIER_ORDER`` (weakest first; the values SANDBOX__TIER and
MIN_TIER accept): a tier named there is the module of that name here. Adding a tier is its
module and its place in that list."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from app import settings

if TYPE_CHECKING:
    from app.sandbox.tier import Tier


def get_tier(name: str) -> Tier:
    """The tier of that name (one of TIER_ORDER)."""
    if name not in settings.TIER_ORDER:
        raise ValueError(f"no sandbox tier {name!r} (known: {', '.join(settings.TIER_ORDER)})")
    tier: Tier = importlib.import_module(f"{__name__}.{name}").TIER
    return tier


def auto_tiers() -> list[Tier]:
    """What ``SANDBOX__TIER=auto`` tries, strongest first: every tier that is not used only when
    named."""
    tiers = [get_tier(name) for name in reversed(settings.TIER_ORDER)]
    return [t for t in tiers if t.auto]
