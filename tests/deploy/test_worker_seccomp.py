"""The worker container's seccomp profile as committed (deploy/worker-seccomp.json) is the
generator's output (deploy/seccomp_worker.py), allows no call the generator keeps out, and is what
the compose file and the Compose v1 translation give the worker. The profile in force is tested
against a running stack in tests/stack/test_seccomp.py."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy import seccomp_worker
from deploy.seccomp_worker import DENIED, GROUPS, SOCKET_FAMILIES, allowed, render
from deploy.worker_run import run_args, security_opt
from tests.support.server import ROOT

PROFILE_PATH = ROOT / "deploy" / "worker-seccomp.json"
UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"

# Named in the task that asked for this profile: each is dangerous and nothing in the worker needs it.
MUST_STAY_OUT = {
    "keyctl", "add_key", "request_key", "bpf", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "perf_event_open",
    "userfaultfd", "iopl", "ioperm", "swapon", "swapoff", "reboot", "acct", "settimeofday",
    "clock_settime", "lookup_dcookie", "quotactl", "mount_setattr", "fsopen", "fsmount",
    "move_mount", "open_tree", "io_uring_setup", "process_vm_writev", "unshare", "setns",
    "personality",
}


def _allow_rules(profile: dict) -> list[dict]:
    return [rule for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"]


def test_the_committed_profile_is_the_generators_output() -> None:
    assert PROFILE_PATH.read_text() == seccomp_worker.text()
    check = subprocess.run([sys.executable, str(ROOT / "deploy" / "seccomp_worker.py"), "--check"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_a_hand_edited_profile_is_caught(tmp_path) -> None:
    edited = tmp_path / "worker-seccomp.json"
    profile = render()
    profile["syscalls"][0]["names"].append("keyctl")  # a hand edit that widens the profile
    edited.write_text(json.dumps(profile, indent=2) + "\n")
    assert seccomp_worker.stale(edited) and seccomp_worker.stale(tmp_path / "missing.json")
    assert not seccomp_worker.stale(PROFILE_PATH)


def test_it_fails_closed_and_keeps_the_dangerous_calls_out() -> None:
    profile = json.loads(PROFILE_PATH.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"  # EPERM, runc's errno for it
    assert "defaultErrnoRet" not in profile  # Docker 20.10 ignores it: the same answer on every engine
    assert profile["architectures"] == ["SCMP_ARCH_X86_64"]
    allowed_names = {name for rule in _allow_rules(profile) for name in rule["names"]}
    # unshare only for a new mount namespace, its flags exactly CLONE_NEWNS (runsc's launch):
    # never a user, pid or network namespace
    assert not allowed_names & MUST_STAY_OUT - {"unshare"}
    unshare_rules = [rule for rule in _allow_rules(profile) if "unshare" in rule["names"]]
    assert [(rule["names"], rule["args"]) for rule in unshare_rules] == [
        (["unshare"], [{"index": 0, "value": 0x00020000, "op": "SCMP_CMP_EQ"}])]
    assert MUST_STAY_OUT - {"unshare", "setns", "personality"} <= DENIED
    (deny,) = [rule for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO"]
    assert set(deny["names"]) == DENIED and deny["errnoRet"] == 1  # EPERM
    assert {rule["action"] for rule in profile["syscalls"]} == {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO"}


def test_every_group_says_why_and_no_call_is_listed_twice() -> None:
    names = [name for _, group in GROUPS for name in group]
    assert len(names) == len(set(names))
    assert all(why.strip() and group for why, group in GROUPS)
    assert len(allowed()) == len(names) + 2  # and socket(2), for some families only, and unshare(2)


def test_socket_is_allowed_only_for_unix_and_ip_families() -> None:
    rules = [rule for rule in _allow_rules(render()) if "socket" in rule["names"]]
    assert all(rule["names"] == ["socket"] for rule in rules)
    assert sorted(rule["args"][0]["value"] for rule in rules) == sorted(SOCKET_FAMILIES.values()) == [1, 2, 10]
    assert all(len(rule["args"]) == 1 and rule["args"][0]["index"] == 0 and rule["args"][0]["op"] == "SCMP_CMP_EQ"
               for rule in rules)
    assert all("args" not in rule for rule in _allow_rules(render()) if rule["names"] not in (["socket"], ["unshare"]))


def test_the_generator_refuses_a_call_both_allowed_and_denied(monkeypatch) -> None:
    monkeypatch.setattr(seccomp_worker, "GROUPS", [*GROUPS, ("a mistake", ["bpf"])])
    with pytest.raises(ValueError, match="bpf"):
        render()
    monkeypatch.setattr(seccomp_worker, "GROUPS", [*GROUPS, ("twice", ["read"])])
    with pytest.raises(ValueError, match="two groups"):
        render()


@pytest.mark.skipif(not Path(UNISTD).exists(), reason="needs the x86_64 kernel headers")
def test_every_name_is_an_x86_64_system_call() -> None:
    known = set(re.findall(r"#define __NR_(\w+) \d+", Path(UNISTD).read_text()))
    assert set(allowed()) <= known
    assert not DENIED - known


def test_compose_gives_the_worker_the_profile_not_unconfined() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    opts = compose["services"]["worker"]["security_opt"]
    assert "seccomp=deploy/worker-seccomp.json" in opts
    assert not [o for o in opts if "unconfined" in o and o.startswith("seccomp")]
    assert "no-new-privileges:true" in opts


def test_compose_v1_translation_passes_the_profile_by_absolute_path() -> None:
    # `docker-compose config` (v1) prints the option as seccomp:PATH, PATH as the compose file has it
    assert security_opt("seccomp:deploy/worker-seccomp.json") == f"seccomp={PROFILE_PATH}"
    assert security_opt("seccomp=deploy/worker-seccomp.json") == f"seccomp={PROFILE_PATH}"
    assert security_opt("seccomp:/etc/x.json") == "seccomp=/etc/x.json"
    assert security_opt("seccomp=unconfined") == "seccomp=unconfined"
    assert security_opt("no-new-privileges:true") == "no-new-privileges:true"
    assert security_opt("apparmor=unconfined") == "apparmor=unconfined"
    config = {"services": {"worker": {"image": "w", "security_opt": ["no-new-privileges:true",
                                                                     "seccomp:deploy/worker-seccomp.json"]}}}
    pairs = set(itertools.pairwise(run_args(config, "proj", 1)))
    assert ("--security-opt", f"seccomp={PROFILE_PATH}") in pairs
    assert ("--security-opt", "no-new-privileges:true") in pairs
