"""Tenants: who may call, how often, how much queued work each may hold, and which judge
endpoints each may reach. Keys are stored as SHA-256 digests: they are random 256-bit tokens,
so a fast hash is enough and the file holds nothing a reader could replay."""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
# Defaults of a tenant that sets none, sized for RL: a rollout step of 512 prompts x 8 samples
# (4096 grades) goes through at once, and a step every 40 s or so is sustained (100 grades/s).
# Rate and burst count grades (a batch of 200 costs 200), not requests. The in-flight cap counts
# queued gradings (judge, impl) and is twice the largest batch, so one batch always fits.
DEFAULT_RATE_PER_SECOND = 100.0
DEFAULT_BURST = 4096
DEFAULT_MAX_IN_FLIGHT = 1024


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    rate_per_second: float = math.inf  # grades per second, refilling a bucket of `burst` grades
    burst: int = 1
    max_in_flight: int | None = None
    # Sees the whole deployment: /metrics, workers, queues, every tenant's counts on the status
    # page. Other tenants see their own activity only.
    operator: bool = False
    judge_model: str | None = None
    judge_base_urls: tuple[str, ...] = field(default_factory=tuple)
    # Keys accepted only as the last segment of the reward URL (/get_reward/<key>), for trainers
    # that cannot send a header (OpenRLHF's --reward.remote_url): a leaked URL opens nothing else.
    reward_key_digests: tuple[str, ...] = field(default_factory=tuple)

    # Show expected values (the gold) in responses to task-id grades: for debugging and evaluation
    # reports only, never for a tenant whose policy can read its grades. None: the server setting
    # (the local user of a deployment without a tenants file).
    reveal_expected: bool | None = None
    # Grades per held-out item and window for this tenant; None: the server's held_out setting.
    held_out_grades_per_item: int | None = None

    def reveals_expected(self, default: bool) -> bool:
        return default if self.reveal_expected is None else self.reveal_expected


# The single user of a deployment without a tenants file (loopback only): its operator too.
LOCAL_TENANT = Tenant("local", operator=True)
# A caller without a key on the routes open to anyone (/healthz, /readyz).
ANONYMOUS = Tenant("anonymous")


class TenantsFileError(ValueError):
    pass


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """(key to hand to the tenant, digest to put in the tenants file)."""
    key = "sg_" + secrets.token_urlsafe(32)
    return key, hash_key(key)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("a list of strings")
    return value


def _tenant(name: str, entry: dict[str, Any], reward_digests: list[str]) -> Tenant:
    return Tenant(
        name=name,
        rate_per_second=float(entry.get("rate_per_second", DEFAULT_RATE_PER_SECOND)),
        burst=int(entry.get("burst", DEFAULT_BURST)),
        max_in_flight=int(entry.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT)),
        operator=entry.get("operator", False),
        judge_model=entry.get("judge_model"),
        judge_base_urls=tuple(_strings(entry.get("judge_base_urls", []))),
        reveal_expected=entry.get("reveal_expected", False),
        reward_key_digests=tuple(d.lower() for d in reward_digests),
        held_out_grades_per_item=entry.get("held_out_grades_per_item"),
    )


def load_tenants(path: Path) -> dict[str, Tenant]:
    """Key digest -> tenant. Refuses files that would be ambiguous or unsafe."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TenantsFileError(f"cannot read tenants file {path}: {exc}") from None
    by_digest: dict[str, Tenant] = {}
    names: set[str] = set()
    for i, entry in enumerate(data.get("tenant", [])):
        name = entry.get("name")
        # A string: every Redis key and grade-ledger field holds the name as text, and readers
        # compare the text they parse with it (``name = 7`` would never match "7"; a list is not
        # hashable).
        if not isinstance(name, str) or not name or name in names:
            raise TenantsFileError(f"tenant #{i + 1}: a unique 'name' (a non-empty string) is required")
        names.add(name)
        digests = entry.get("key_sha256", [])
        digests = [digests] if isinstance(digests, str) else digests
        if not digests or any(len(d) != 64 for d in digests):
            raise TenantsFileError(f"tenant {name!r}: 'key_sha256' must hold SHA-256 hex digests")
        reward_digests = entry.get("reward_key_sha256", [])
        reward_digests = [reward_digests] if isinstance(reward_digests, str) else reward_digests
        if any(not isinstance(d, str) or len(d) != 64 for d in reward_digests):
            raise TenantsFileError(f"tenant {name!r}: 'reward_key_sha256' must hold SHA-256 hex digests")
        try:
            tenant = _tenant(name, entry, reward_digests)
        except (TypeError, ValueError, OverflowError):  # "fast" for a rate, a list for a number, inf for a count
            raise TenantsFileError(f"tenant {name!r}: a value has the wrong type") from None
        budget = tenant.held_out_grades_per_item
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
            raise TenantsFileError(f"tenant {name!r}: 'held_out_grades_per_item' must be a positive integer")
        if tenant.judge_model is not None and not isinstance(tenant.judge_model, str):
            raise TenantsFileError(f"tenant {name!r}: 'judge_model' must be a string")
        if not isinstance(tenant.operator, bool):
            raise TenantsFileError(f"tenant {name!r}: 'operator' must be true or false")
        if not isinstance(tenant.reveal_expected, bool):
            raise TenantsFileError(f"tenant {name!r}: 'reveal_expected' must be true or false")
        if not tenant.rate_per_second > 0 or math.isinf(tenant.rate_per_second) or tenant.burst < 1:
            raise TenantsFileError(f"tenant {name!r}: rate_per_second and burst must be positive")
        for digest in digests:
            if digest.lower() in by_digest:
                raise TenantsFileError(f"tenant {name!r}: a key digest is listed twice")
            by_digest[digest.lower()] = tenant
    if not by_digest:
        raise TenantsFileError(f"tenants file {path} lists no tenant")
    reward_digests = [d for t in {id(t): t for t in by_digest.values()}.values() for d in t.reward_key_digests]
    if len(set(reward_digests)) != len(reward_digests) or set(reward_digests) & set(by_digest):
        raise TenantsFileError("a reward key digest is listed twice, or is also an API key digest")
    return by_digest


class TenantsFile:
    """The tenants file as the API serves it: read again, without a restart, when it changes (its
    modification time, size or inode; checked at most once a second, a stat call). A change that
    does not load (a typo mid-edit) keeps the tenants in force and is logged, so a bad edit never
    opens the service or locks everyone out; the next good save takes effect."""

    CHECK_SECONDS = 1.0

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self._tenants = load_tenants(path)  # a bad file at start is fatal, as before
        self._reward_keys = _reward_keys(self._tenants)
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            info = self.path.stat()
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.CHECK_SECONDS:
            return
        with self._lock:
            self._checked = now
            stamp = self._stat()
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                tenants = load_tenants(self.path)
            except TenantsFileError as exc:
                log.error("tenants file changed but does not load; the tenants in force stay: %s", exc)
                return
            self._tenants, self._reward_keys = tenants, _reward_keys(tenants)
            log.info("tenants file reloaded: %d tenants", len({t.name for t in tenants.values()}))

    def by_key_digest(self) -> dict[str, Tenant]:
        self._refresh()
        return self._tenants

    def by_reward_key_digest(self) -> dict[str, Tenant]:
        self._refresh()
        return self._reward_keys


def _reward_keys(tenants: dict[str, Tenant]) -> dict[str, Tenant]:
    return {d: t for t in tenants.values() for d in t.reward_key_digests}
