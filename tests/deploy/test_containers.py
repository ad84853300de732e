"""The container files cannot be run here (no Docker engine on this machine), so their integrity
is checked instead: the compose file's hardening, the seccomp profile's content, and that every
command the images run exists in the CLI."""

from __future__ import annotations

import json
import re
import tomllib

import yaml

from app.cli import build_parser
from app.tenants import load_tenants
from tests.support.server import ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_worker_is_hardened() -> None:
    worker = COMPOSE["services"]["worker"]
    assert worker["read_only"] is True
    assert worker["cap_drop"] == ["ALL"] and "cap_add" not in worker
    assert "no-new-privileges:true" in worker["security_opt"]
    assert any(t.startswith("/tmp") for t in worker["tmpfs"])
    assert worker["pids_limit"] > 0 and worker["mem_limit"]
    assert not str(worker.get("user", "")).startswith("0")
    seccomp = next(o.split("=", 1)[1] for o in worker["security_opt"] if o.startswith("seccomp="))
    assert (ROOT / seccomp).is_file()


def test_seccomp_profile_denies_dangerous_calls_but_lets_bubblewrap_work() -> None:
    profile = json.loads((ROOT / "docker" / "seccomp-worker.json").read_text())
    denied = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" for name in rule["names"]}
    assert {"bpf", "keyctl", "ptrace", "kexec_load", "init_module", "io_uring_setup", "userfaultfd"} <= denied
    assert not {"unshare", "clone", "clone3", "mount", "pivot_root", "setns"} & denied
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"


def test_redis_persists_with_aof() -> None:
    command = COMPOSE["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"


def test_images_run_commands_the_cli_has() -> None:
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for dockerfile in (ROOT / "docker").glob("*.Dockerfile"):
        text = dockerfile.read_text()
        cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
        assert cmd[0] == "scaling-grader" and cmd[1] in commands, dockerfile.name
        assert re.search(r"^USER (?!root)\w+", text, re.M), f"{dockerfile.name} must not run as root"
        for path in re.findall(r"^COPY (\S+) ", text, re.M):
            assert (ROOT / path).exists(), path


def test_example_tenants_file_loads() -> None:
    tomllib.loads((ROOT / "deploy" / "tenants.example.toml").read_text())
    tenants = load_tenants(ROOT / "deploy" / "tenants.example.toml")
    assert {t.name for t in tenants.values()} == {"team-a"}
