"""Start and stop duties of an entry point that runs sandboxes (``serve`` in embedded mode, the
worker): remove what killed predecessors left, and refuse the plain tier where many tenants'
code would share the host without the operator's consent."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.sandbox.cgroups import CgroupHost
from app.sandbox.launch import SandboxFault
from app.sandbox.owners import remove_stale_dirs
from app.sandbox.pool import get_sandbox, plain_tier_refusal

if TYPE_CHECKING:
    from app.settings import Settings


def remove_stale_leftovers() -> list[str]:
    """Staging and case directories and control groups of service processes that are dead."""
    removed = remove_stale_dirs()
    host = CgroupHost.detect()  # removes dead processes' groups as it sets up its own
    if host is not None:
        host.close()
    return removed


def _loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if url.startswith("unix://") or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_multi_tenant(settings: Settings, worker: bool = False) -> bool:
    """A tenants file means many parties; a worker fed by a Redis on another host serves one."""
    if settings.tenants_file is not None:
        return True
    return worker and bool(settings.redis_url) and not _loopback_url(settings.redis_url or "")


def plain_tier_error(settings: Settings, worker: bool = False) -> str | None:
    """Why this process must not start (the plain tier without consent), or None."""
    try:
        return plain_tier_refusal(get_sandbox(settings.sandbox), is_multi_tenant(settings, worker))
    except SandboxFault:
        return None  # no tier at all: the service starts and /readyz says why it is not ready
