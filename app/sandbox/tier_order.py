"""The minimum tier a deployment accepts (``SCALING_GRADER_SANDBOX__MIN_TIER``), against the one
ranking of tiers (``app.settings.TIER_ORDER``, weakest first).

Tiers are ranked by isolation only; seccomp is required separately (``SANDBOX__SECCOMP=require``).
``plain`` shares the host's kernel, filesystem and process table; ``bubblewrap`` shares only the
host's kernel; ``gvisor`` puts a user-space kernel of its own between the case and the host's.
A process whose strongest working tier ranks below the minimum refuses impl grades with a clear
reason instead of running candidate code in a weaker sandbox than the operator asked for."""

from __future__ import annotations

from app import settings


def isolation_of(tier_name: str) -> str:
    """``bubblewrap+seccomp`` -> ``bubblewrap``."""
    return tier_name.split("+", 1)[0]


def meets_minimum(tier_name: str | None, minimum: str) -> bool:
    """True when the tier in force (None: no tier starts) is at least as strong as minimum."""
    order = settings.TIER_ORDER
    if not tier_name or isolation_of(tier_name) not in order:
        return False
    return order.index(isolation_of(tier_name)) >= order.index(minimum)


def refusal(tier_name: str | None, minimum: str) -> str | None:
    """Why impl grading is refused here, or None when the tier in force is acceptable."""
    if meets_minimum(tier_name, minimum):
        return None
    have = f"the strongest sandbox tier that works here is {tier_name}" if tier_name else "no sandbox tier works here"
    return f"{have}, below the minimum tier '{minimum}' this deployment requires; the code was not run"


def above_weakest(minimum: str) -> bool:
    """Whether the minimum excludes any tier (a minimum of the weakest tier is met by every one)."""
    return minimum != settings.TIER_ORDER[0]
