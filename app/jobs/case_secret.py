"""The deployment's case secret when the operator configured none.

Hidden cases are drawn from a seed derived from the case secret (app.graders.impl_cases), so
every worker of a deployment must hold the same one: otherwise the same completion draws other
cases, and may get another reward, depending on which worker takes its job. A secret configured
in the settings wins; without one, the first worker to ask stores a random one in Redis (SET NX,
never overwritten) and every process reads that same value. It is read once per job, one
command: a Redis that lost its data (no persistence) gets a new secret, and every worker
follows it together rather than each keeping its own."""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import SecretStr

from app.jobs.keys import PREFIX
from app.settings import ImplSettings, Settings

KEY = f"{PREFIX}:case-secret"


def deployment_secret(connection: Any) -> str:
    """The secret stored in this Redis, stored first if there is none (one command: SET NX GET)."""
    candidate = secrets.token_hex(32)
    stored = connection.set(KEY, candidate, nx=True, get=True)  # the old value, or None if ours was set
    if stored is None:
        return candidate
    return stored.decode() if isinstance(stored, bytes) else str(stored)


def with_deployment_secret(settings: Settings, connection: Any) -> Settings:
    """Settings whose case secret every worker shares: the configured one, else the one in Redis."""
    if settings.impl.case_secret is not None:
        return settings
    impl = ImplSettings(case_secret=SecretStr(deployment_secret(connection)))
    return settings.model_copy(update={"impl": impl})
