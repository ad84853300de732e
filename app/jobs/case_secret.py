"""The deployment's case secret when the operator configured none.

Hidden cases are drawn from a seed derived from the case secret (app.graders.impl_cases), so
every worker of a deployment must hold the same one: otherwise the same completion draws other
cases, and may get another reward, depending on which worker takes its job. A secret configured
in the settings wins (`make stack` generates one into its state directory and passes it to every
container). Without one, the first worker to ask stores a random one in Redis (SET NX, never
overwritten) and every process reads that same value.

A Redis that loses its data (restarted without persistence, FLUSHALL, a fresh volume) must not
change the secret, or the same completion would draw other cases and could earn another reward.
So every process keeps the secret it has read and, finding the key gone, puts its own back with
the same SET NX: every such process holds the same value, so whichever comes first restores it
and the others read it back. Only a deployment whose every process started after the loss (with
no configured secret) gets a new one."""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

from pydantic import SecretStr

from app.jobs.keys import PREFIX
from app.settings import ImplSettings, Settings

KEY = f"{PREFIX}:case-secret"
log = logging.getLogger(__name__)

_lock = threading.Lock()
_known: str | None = None  # the deployment's secret as this process first read it


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def deployment_secret(connection: Any) -> str:
    """The deployment's secret: the one this process already holds (put back if Redis lost it),
    else the one stored in Redis, stored first if there is none. One command: SET NX GET."""
    global _known
    with _lock:
        candidate = _known or secrets.token_hex(32)
        stored = connection.set(KEY, candidate, nx=True, get=True)  # the old value, or None if ours was set
        if stored is None:
            if _known is not None:
                log.warning("the case secret was gone from Redis (data lost?); this process put it back")
            _known = candidate
            return candidate
        value = _text(stored)
        if _known is not None and value != _known:
            # Another process that never saw the old secret stored a new one first: follow Redis,
            # so the deployment's workers agree again (the old one cannot be restored by us alone).
            log.error("the case secret in Redis differs from the one this process held; following Redis")
        _known = value
        return value


def restore_known_secret(connection: Any) -> None:
    """Put back the secret this process holds if Redis lost it (SET NX; nothing if it never read
    one, or a secret is configured). Run by the deployment's maintenance lane every interval, so a
    lost key comes back even before the next job needs it."""
    with _lock:
        if _known is not None and connection.set(KEY, _known, nx=True):
            log.warning("the case secret was gone from Redis (data lost?); this process put it back")


def forget_known_secret() -> None:
    """Drop the remembered secret (tests that start a deployment afresh in one process)."""
    global _known
    with _lock:
        _known = None


def with_deployment_secret(settings: Settings, connection: Any) -> Settings:
    """Settings whose case secret every worker shares: the configured one, else the one in Redis."""
    if settings.impl.case_secret:  # an empty value (compose's unset variable) counts as none
        return settings
    impl = ImplSettings(case_secret=SecretStr(deployment_secret(connection)))
    return settings.model_copy(update={"impl": impl})
