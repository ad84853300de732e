"""The compose file as Compose reads it: ${VAR:-default} replaced (by the given variables, else
the default), the only form of interpolation docker-compose.yml uses."""

from __future__ import annotations

import re

import yaml

from tests.support.server import ROOT

COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()


def interpolated(text: str = COMPOSE_TEXT, env: dict[str, str] | None = None) -> dict:
    env = env or {}
    return yaml.safe_load(re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m[1], m[2]), text))
