"""No cross-site grading: a browser request is served only if it comes from this service's own
pages. A page on another site can make the operator's browser send requests here (a form post,
a fetch with a ``text/plain`` body) and, by rebinding its own DNS name to this address, make
them look same-origin; both would grade, and reveal answers, with the operator's access.

Browsers mark their requests (``Origin`` on every non-GET, ``Sec-Fetch-Site`` on all of them in
current browsers); trainers, curl and the client package send neither and are not affected.
A marked request is refused (403) when

- it names a foreign site (``Origin`` other than the ``Host`` it was sent to, or
  ``Sec-Fetch-Site: cross-site``) and is not a plain read (GET or HEAD), or
- its ``Host`` is not one this service answers to: the loopback names, the bind address and
  ``allowed_hosts``. Checked when that list means something: always without a tenants file (the
  loopback user needs no key, so a rebound name is the whole attack), and with a tenants file
  once ``allowed_hosts`` is set (keys are per origin there, so a rebound page has none).

Grading and reward routes also take JSON bodies only (see ``app.api.bodies.parse_body``): no
form or ``text/plain`` post, which a browser sends cross-site without asking first."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

_SAFE_METHODS = frozenset({"GET", "HEAD"})


def host_name(authority: str) -> str:
    """The host of a ``Host`` header or an origin's authority, without port or brackets."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    return authority.rpartition(":")[0] if authority.count(":") == 1 else authority


def is_loopback(host: str) -> bool:
    """A bind address or host name that only this machine reaches."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BrowserGuard:
    """ASGI middleware. ``allowed_hosts``: the operator's names (an origin under one of them is
    this service too, as behind a proxy); ``check_hosts`` False: Origin checks only."""

    def __init__(self, app: Any, bind_host: str, allowed_hosts: Iterable[str], check_hosts: bool) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed_hosts if h)
        self.bind_host = host_name(bind_host)
        self.check_hosts = check_hosts

    def _known_host(self, name: str) -> bool:
        return is_loopback(name) or name == self.bind_host or name in self.allowed

    def refusal(self, scope: dict[str, Any]) -> str | None:
        headers = {k: v for k, v in scope.get("headers", ()) if k in (b"host", b"origin", b"sec-fetch-site")}
        origin = headers.get(b"origin")
        site = headers.get(b"sec-fetch-site")
        if origin is None and site is None:
            return None  # not a browser: trainers and scripts are not a confused deputy
        host = headers.get(b"host", b"").decode("latin-1")
        if self.check_hosts and not self._known_host(host_name(host)):
            return "this service does not answer browsers under that host name"
        if scope["method"] in _SAFE_METHODS:
            return None
        if site == b"cross-site":
            return "cross-site requests are refused"
        if origin is not None:
            # "null" (a sandboxed frame, a file) has no netloc, so it never matches
            netloc = urlsplit(origin.decode("latin-1")).netloc.lower()
            if netloc != host.strip().lower() and (not netloc or host_name(netloc) not in self.allowed):
                return "requests from another origin are refused"
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (why := self.refusal(scope)) is not None:
            body = json.dumps({"error": "cross_site_refused", "detail": why}).encode()
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
