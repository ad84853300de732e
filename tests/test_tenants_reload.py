"""The tenants file is read again when it changes, without a restart: a new tenant's key works
and a removed one's stops working; an edit that does not load keeps the tenants in force."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from app.tenants import TenantsFile, TenantsFileError, new_key
from tests.support.server import running_server


def _entry(name: str, digest: str) -> str:
    return f'[[tenant]]\nname = "{name}"\nkey_sha256 = "{digest}"\n'


def _write(path: Path, text: str) -> None:
    """Replace the file as editors and config management do (a new inode), with a new mtime."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def test_changes_are_picked_up_and_a_bad_edit_keeps_the_tenants_in_force(tmp_path) -> None:
    (_, digest_a), (_, digest_b) = new_key(), new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(_entry("a", digest_a))
    tenants = TenantsFile(path)
    tenants.CHECK_SECONDS = 0.0
    assert set(tenants.by_key_digest()) == {digest_a}
    _write(path, _entry("b", digest_b))
    assert set(tenants.by_key_digest()) == {digest_b}  # a removed, b added
    _write(path, _entry("b", digest_b) + "[[tenant]\nname = ")  # a typo mid-edit
    assert set(tenants.by_key_digest()) == {digest_b}
    path.unlink()  # gone: the tenants in force stay, nobody is let in unauthenticated
    assert set(tenants.by_key_digest()) == {digest_b}
    _write(path, _entry("a", digest_a) + _entry("b", digest_b))
    assert set(tenants.by_key_digest()) == {digest_a, digest_b}


@pytest.mark.parametrize("bad", [
    'rate_per_second = "fast"', "burst = [1]", "max_in_flight = 1.5e400", "rate_per_second = nan",
    "rate_per_second = inf", 'judge_base_urls = "http://judge:8000/v1"', "judge_base_urls = [1]",
    "judge_model = 7", "max_in_flight = {a = 1}",
])
def test_a_value_of_the_wrong_type_is_a_bad_edit_not_an_error_page(tmp_path, bad: str) -> None:
    """An edit that parses as TOML but holds a value of the wrong type is refused like a typo: the
    tenants in force stay (before, a ValueError or TypeError escaped the reload: a 500)."""
    (_, digest_a), (_, digest_b) = new_key(), new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(_entry("a", digest_a))
    tenants = TenantsFile(path)
    tenants.CHECK_SECONDS = 0.0
    _write(path, _entry("b", digest_b) + bad + "\n")
    assert set(tenants.by_key_digest()) == {digest_a}
    with pytest.raises(TenantsFileError):
        TenantsFile(path)


def test_checks_are_at_most_once_a_second(tmp_path) -> None:
    (_, digest_a), (_, digest_b) = new_key(), new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(_entry("a", digest_a))
    tenants = TenantsFile(path)
    _write(path, _entry("b", digest_b))
    assert set(tenants.by_key_digest()) == {digest_a}  # not yet looked at
    time.sleep(TenantsFile.CHECK_SECONDS + 0.1)
    assert set(tenants.by_key_digest()) == {digest_b}


def test_a_bad_file_at_start_is_still_fatal(tmp_path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text("[[tenant]]\nname = 'x'\n")
    with pytest.raises(TenantsFileError):
        TenantsFile(path)


@pytest.mark.slow
def test_a_running_server_takes_a_new_key_and_drops_a_removed_one(tmp_path) -> None:
    (key_a, digest_a), (key_b, digest_b) = new_key(), new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(_entry("a", digest_a))
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    with running_server({"SCALING_GRADER_TENANTS_FILE": str(path)}) as url:
        def status(key: str) -> int:
            return httpx.post(url + "/v1/grade", json=body, headers={"Authorization": f"Bearer {key}"}).status_code

        assert (status(key_a), status(key_b)) == (200, 401)
        _write(path, _entry("b", digest_b))
        deadline = time.monotonic() + 10
        while status(key_b) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (status(key_a), status(key_b)) == (401, 200)
