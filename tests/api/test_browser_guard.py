"""Browser requests in-process (the hostile-client suite does the same against a real server):
a page on another site, or one that rebound its DNS name to this address, cannot grade; the
service's own pages and every non-browser client still can. And ``create_app`` itself refuses a
public bind without tenants, whoever builds the app."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import PublicBindRefused, create_app
from app.settings import Settings
from app.tenants import new_key

GRADE = {"reference": {"values": ["3 s"]}, "completion": "Final answer: 3 s"}


@pytest.fixture(scope="module")
def local() -> TestClient:
    return TestClient(create_app(Settings()))


def test_scripts_and_trainers_are_not_browsers(local: TestClient) -> None:
    # no Origin, no Sec-Fetch-*: any Host (TestClient sends "testserver"), as before
    assert local.post("/v1/grade", json=GRADE).json()["reward"] == 1.0


@pytest.mark.parametrize(("method", "path", "headers"), [
    # DNS rebinding: evil.example now resolves to 127.0.0.1, so the browser calls it same-origin
    ("POST", "/v1/grade", {"host": "evil.example:8000", "origin": "http://evil.example:8000"}),
    ("GET", "/v1/status", {"host": "evil.example:8000", "sec-fetch-site": "same-origin"}),
    ("GET", "/", {"host": "evil.example", "sec-fetch-site": "none"}),
    # a page elsewhere posting to the loopback service
    ("POST", "/v1/grade", {"host": "127.0.0.1:8000", "origin": "https://evil.example"}),
    ("POST", "/get_reward", {"host": "localhost:8000", "sec-fetch-site": "cross-site"}),
])
def test_a_loopback_service_refuses_foreign_browser_requests(local: TestClient, method: str, path: str,
                                                             headers: dict[str, str]) -> None:
    r = local.request(method, path, json=GRADE if method == "POST" else None, headers=headers)
    assert r.status_code == 403 and r.json()["error"] == "cross_site_refused"


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "127.0.0.1"])
def test_its_own_pages_still_work(local: TestClient, host: str) -> None:
    origin = f"http://{host}"
    r = local.post("/v1/grade", json=GRADE, headers={"host": host, "origin": origin, "sec-fetch-site": "same-origin"})
    assert r.status_code == 200 and r.json()["reward"] == 1.0
    assert local.get("/docs", headers={"host": host, "sec-fetch-site": "none"}).status_code == 200


def test_allowed_hosts_name_the_service_behind_a_proxy() -> None:
    client = TestClient(create_app(Settings(allowed_hosts=["grader.example.org"])))
    ok = {"host": "grader.example.org", "origin": "https://grader.example.org"}
    assert client.post("/v1/grade", json=GRADE, headers=ok).status_code == 200
    evil = {"host": "evil.example", "origin": "https://evil.example"}
    assert client.post("/v1/grade", json=GRADE, headers=evil).status_code == 403


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "grader.example.org"])
def test_create_app_refuses_a_public_bind_without_tenants(host: str) -> None:
    with pytest.raises(PublicBindRefused):
        create_app(Settings(host=host))


def test_a_public_bind_with_tenants_is_served(tmp_path: Path) -> None:
    _, digest = new_key()
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "t"\nkey_sha256 = "{digest}"\n')
    app = create_app(Settings(host="0.0.0.0", tenants_file=tenants))
    assert TestClient(app).get("/healthz").status_code == 200
