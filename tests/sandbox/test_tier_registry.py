"""Tiers are objects found by name from one list: a new tier is its module and its place in
``app.settings.TIER_ORDER``, and settings validation, the minimum-tier ranking, ``auto`` and the
pool (probe, start, fork server, status) all pick it up with no other module touched; taken out
again, every one of them refuses it. Names outside the list never reach an import."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

import app.settings
from app.sandbox.plan import Plan
from app.sandbox.policy import Policy
from app.sandbox.pool import Sandbox, candidate_tiers
from app.sandbox.tier_order import above_weakest, meets_minimum, refusal
from app.sandbox.tiers import auto_tiers, get_tier
from app.sandbox.tiers.plain import PlainTier
from app.settings import TIER_ORDER, SandboxSettings
from tests.sandbox.tiers import SHORT_LIMITS

TOY = "toy"


class ToyTier(PlainTier):
    """A tier of its own name that starts its children as the plain tier does, and counts what
    the pool asks of it, so that the test sees the pool go through it."""

    name = TOY
    guarantees = "whatever the plain tier guarantees (a test's toy)"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy | None:
        self.calls.append("policy")
        return None

    def start(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        self.calls.append("start")
        return super().start(*args, **kwargs)  # type: ignore[arg-type]

    def fork_server(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        self.calls.append("fork_server")
        return super().fork_server(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ToyTier]:
    """Register the toy tier in the one place: its module, and its rank (between plain and
    bubblewrap) in the one list."""
    tier = ToyTier()
    module = types.ModuleType(f"app.sandbox.tiers.{TOY}")
    module.TIER = tier  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(app.settings, "TIER_ORDER", (TIER_ORDER[0], TOY, *TIER_ORDER[1:]))
    yield tier


def test_settings_validation_accepts_a_registered_tier_and_refuses_it_once_removed(
    toy: ToyTier, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SandboxSettings(tier=TOY, min_tier=TOY).tier == TOY
    monkeypatch.undo()
    with pytest.raises(ValidationError):
        SandboxSettings(tier=TOY)
    with pytest.raises(ValidationError):
        SandboxSettings(min_tier=TOY)
    with pytest.raises(ValueError, match="no sandbox tier"):
        get_tier(TOY)


def test_the_ranking_places_a_registered_tier_where_the_list_does(toy: ToyTier) -> None:
    assert meets_minimum(f"{TOY}+seccomp", "plain") and meets_minimum(TOY, TOY)
    assert not meets_minimum(TOY, "bubblewrap") and meets_minimum("bubblewrap+seccomp", TOY)
    assert not meets_minimum("plain+seccomp", TOY)
    assert refusal("plain", TOY) is not None and refusal(TOY, TOY) is None
    assert above_weakest(TOY) and not above_weakest("plain")


def test_auto_tries_a_registered_tier_in_rank_order_and_never_a_named_only_one(toy: ToyTier) -> None:
    names = [t.name for t in auto_tiers()]
    assert names == [n for n in reversed(app.settings.TIER_ORDER) if get_tier(n).auto]
    assert names.index("bubblewrap") < names.index(TOY) < names.index("plain")
    assert "gvisor" not in names  # used only when named
    assert [c.name for c in candidate_tiers(SandboxSettings(tier=TOY, seccomp="auto"))] == [f"{TOY}+seccomp", TOY]


@pytest.mark.slow
@pytest.mark.serial
def test_the_pool_probes_starts_and_reports_a_registered_tier(toy: ToyTier) -> None:
    """A real sandbox under the toy tier: probed, in force, running a case through the toy's own
    start (or fork server), and naming the toy in its status and in the case's tier."""
    box = Sandbox(SandboxSettings(tier=TOY, seccomp="off", **{**SHORT_LIMITS, "warm_pool_size": 0}))  # type: ignore[arg-type]
    try:
        assert box.tier().name == TOY
        run = box.run("def f(a, b):\n    return a + b\n", "f", [2, 3], profile="bare")
        assert run.status == "finished" and (run.final or {}).get("result", {}).get("value") == 5
        assert run.tier == TOY
        status = box.status()
        assert status["ok"] and status["tier"] == TOY and status["probes"] == [{"tier": TOY, "ok": True}]
        assert "start" in toy.calls  # the probe always starts an interpreter
        if run.extra.get("launcher") == "forkserver":
            assert "fork_server" in toy.calls
    finally:
        box.shutdown()


def test_only_the_listed_names_are_tiers() -> None:
    """The tiers package also holds helper modules (runsc.py, gvisor_lane.py); no name outside the
    list reaches an import, whatever modules sit beside the tiers."""
    for name in ("runsc", "gvisor_lane", "__init__", "..plain", "plain.TIER", "os", "", "auto"):
        with pytest.raises(ValueError, match="no sandbox tier"):
            get_tier(name)
        with pytest.raises(ValidationError):
            SandboxSettings(tier=name) if name != "auto" else SandboxSettings(min_tier=name)


def test_every_listed_tier_is_a_module_with_the_protocol() -> None:
    for name in TIER_ORDER:
        tier = get_tier(name)
        assert tier.name == name and isinstance(tier.auto, bool) and isinstance(tier.shares_host, bool)
        assert tier.guarantees and callable(tier.start) and callable(tier.fork_server)
