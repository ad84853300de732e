"""/docs and /redoc work on a machine without internet access: their assets come from an installed
package, the pages name no external URL, and a real headless chromium that cannot reach anything
outside loopback renders every operation of the schema."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.support.browser import CHROMIUM, ProxyTrap, run_chromium
from tests.support.server import ROOT

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it)")
ARTIFACTS = ROOT / "artifacts"
EXTERNAL_URL = re.compile(r"""(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}""", re.IGNORECASE)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


@pytest.fixture
def trap():
    proxy = ProxyTrap()
    yield proxy
    proxy.close()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_doc_pages_load_only_local_assets(client: TestClient, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    # the browser itself refuses any asset from elsewhere (ReDoc's menu carries a CDN logo)
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert EXTERNAL_URL.findall(r.text) == []
    assets = re.findall(r"""(?:src|href)="([^"]+)\"""", r.text)
    assert assets, "the page should load its scripts and styles"
    for asset in assets:
        served = client.get(asset)
        assert served.status_code == 200, asset
        assert len(served.content) > 1000, asset  # the real bundle, not an empty placeholder


def test_swagger_ui_does_not_call_the_public_validator(client: TestClient) -> None:
    assert "validatorUrl" in client.get("/docs").text and '"validatorUrl": null' in client.get("/docs").text


def test_asset_mount_serves_no_path_outside_the_package(client: TestClient) -> None:
    for path in ("/docs/assets/../../../../etc/passwd", "/docs/assets/%2e%2e/%2e%2e/etc/passwd",
                 "/docs/assets/..%2f..%2fcore.py"):
        r = client.get(path)
        assert r.status_code == 404 and "root:" not in r.text


def _operation_paths(url: str) -> set[str]:
    return set(httpx.get(url + "/openapi.json").json()["paths"])


@pytest.mark.slow
@needs_chromium
def test_trap_sees_a_page_that_reaches_outside(trap: ProxyTrap) -> None:
    """The check below can fail: a page with CDN assets shows up in the trap."""
    page = ('data:text/html,<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
            '<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>')
    run_chromium(page, trap, dump_dom=True, budget_ms=3000)
    hosts = " ".join(trap.page_requests())
    assert "cdn.jsdelivr.net" in hosts and "fonts.googleapis.com" in hosts


@pytest.mark.slow
@needs_chromium
def test_swagger_ui_lists_every_operation_offline(server_url: str, trap: ProxyTrap) -> None:
    dom = run_chromium(server_url + "/docs", trap, dump_dom=True)
    rendered = set(re.findall(r'class="opblock-summary-path" data-path="([^"]+)"', dom))
    assert rendered == _operation_paths(server_url)
    ARTIFACTS.mkdir(exist_ok=True)
    run_chromium(server_url + "/docs", trap, screenshot=ARTIFACTS / "api-docs-offline.png", window=(1280, 1600))
    assert trap.page_requests() == []


@pytest.mark.slow
@needs_chromium
def test_redoc_lists_every_operation_offline(server_url: str, trap: ProxyTrap) -> None:
    dom = run_chromium(server_url + "/redoc", trap, dump_dom=True)
    assert 'class="redoc-wrap"' in dom or "redoc-wrap" in dom
    missing = [p for p in _operation_paths(server_url) if p not in dom]
    assert missing == []
    assert trap.page_requests() == []
