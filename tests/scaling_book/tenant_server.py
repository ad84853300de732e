"""A real service with a tenants file: tenant `a` with room to spare, tenant `b` with a small
rate and burst (so that a burst of rollouts meets 429s with Retry-After), and the keys of both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.tenants import new_key
from tests.support.server import running_server


@dataclass(frozen=True)
class TenantService:
    url: str
    key_a: str
    key_b: str
    reward_key_a: str


@contextmanager
def tenant_service(directory: Path, b_rate: float = 4.0, b_burst: int = 4) -> Iterator[TenantService]:
    key_a, digest_a = new_key()
    key_b, digest_b = new_key()
    reward_a, reward_digest_a = new_key()
    path = directory / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "a"\nkey_sha256 = ["{digest_a}"]\nreward_key_sha256 = ["{reward_digest_a}"]\n'
                    "rate_per_second = 1000\nburst = 1000\n\n"
                    f'[[tenant]]\nname = "b"\nkey_sha256 = ["{digest_b}"]\n'
                    f"rate_per_second = {b_rate}\nburst = {b_burst}\n")
    with running_server({"SCALING_GRADER_TENANTS_FILE": str(path)}) as url:
        yield TenantService(url, key_a, key_b, reward_a)
