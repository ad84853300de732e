"""A tenants file for a test server: one tenant per name, each with a fresh key and the extra
TOML lines given (limits, operator), and the keys to call it with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.tenants import new_key


def write_tenants(path: Path, tenants: Mapping[str, str]) -> dict[str, str]:
    """Write ``tenants`` (name -> extra TOML lines) to ``path``; each tenant's key by name."""
    keys, lines = {}, []
    for name, extra in tenants.items():
        keys[name], digest = new_key()
        lines.append(f'[[tenant]]\nname = "{name}"\nkey_sha256 = "{digest}"\n{extra}')
    path.write_text("\n".join(lines))
    return keys
