"""The worker container runs under the project's own seccomp allow-list (deploy/worker-seccomp.json,
rendered by deploy/seccomp_worker.py from a measured syscall set), not `seccomp=unconfined`: gVisor
still builds its sandboxes under it with both launchers, hostile cases still end with their own
verdicts, and the calls the profile keeps out fail inside the container."""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest

from deploy.seccomp_worker import DENIED, allowed, render
from tests.stack.stack import RIGHT, Stack, completion, run
from tests.support.server import ROOT

PROFILE = json.loads((ROOT / "deploy" / "worker-seccomp.json").read_text())

# Graded by the worker container's own interpreter (same image, same seccomp filter: `docker exec`
# joins the container's profile), with the launcher and limits the environment names.
_GRADE = """
import json, sys
from app.graders.impl import grade_source
from app.settings import Settings
from app.tasks.impl.ex_roofline import EXERCISES
exercise = next(e for e in EXERCISES if e.name == 'critical_batch_size')
settings = Settings()
result = grade_source(exercise, sys.stdin.read(), all_or_nothing=True, settings=settings, seed='5ecc0' + '0' * 27)
print(json.dumps({'launcher': settings.sandbox.launcher, 'reward': result.reward, 'outcome': str(result.outcome),
                  'tier': result.details.get('sandbox_tier'), 'counts': result.details.get('counts')}))
"""

# One raw syscall (all six arguments 0 or given), answering its errno (0: it ran).
_SYSCALL = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, number in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(0)] * 6)
    out[name] = ctypes.get_errno() if ret == -1 else 0
print(json.dumps(out))
"""

# x86_64 numbers of the calls probed (asm/unistd_64.h); the profile itself holds names only.
_NUMBERS = {"keyctl": 250, "bpf": 321, "add_key": 248, "kexec_load": 246, "init_module": 175,
            "open_by_handle_at": 304, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
            "getcpu": 309, "getpid": 39}

MEMORY_BOMB = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    hoard = []\n"
    "    while True:\n"
    "        hoard.append(bytearray(64 << 20))\n"
)
FORK_BOMB = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import os\n"
    "    while True:\n"
    "        try:\n"
    "            os.fork()\n"
    "        except OSError:\n"
    "            pass\n"
)
SPIN = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    while True:\n"
    "        pass\n"
)


def _source(text: str) -> str:
    return text.split("```python\n", 1)[1].rsplit("```", 1)[0]


def _grade_in(container: str, source: str, **env: str) -> dict:
    flags = [a for k, v in env.items() for a in ("--env", f"SCALING_GRADER_SANDBOX__{k.upper()}={v}")]
    done = subprocess.run(["docker", "exec", "-i", *flags, container, "python", "-c", _GRADE], input=source,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-800:]
    return json.loads(done.stdout.splitlines()[-1])


def test_every_worker_runs_under_the_profile_not_unconfined(stack: Stack) -> None:
    workers = stack.containers("worker")
    assert workers
    for container in workers:
        opts = json.loads(run("docker", "inspect", "--format", "{{json .HostConfig.SecurityOpt}}", container))
        assert "seccomp=unconfined" not in opts and "seccomp:unconfined" not in opts, opts
        (seccomp,) = [o for o in opts if o.startswith(("seccomp=", "seccomp:"))]
        assert json.loads(seccomp.split("=", 1)[1]) == PROFILE  # the CLI sends the profile's content
        status = run("docker", "exec", container, "grep", "^Seccomp", "/proc/1/status")
        assert "Seccomp:\t2" in status, status  # filter mode: pid 1 (the init) and so everything below


def test_calls_kept_out_and_an_unlisted_call_fail_with_eperm(stack: Stack) -> None:
    assert "getcpu" not in allowed() and "getcpu" not in DENIED  # harmless, but nothing needs it
    container = stack.containers("worker")[0]
    out = json.loads(run("docker", "exec", container, "python", "-c", _SYSCALL, json.dumps(_NUMBERS)))
    kept_out = {name for name in _NUMBERS if name not in ("getcpu", "getpid")}
    assert kept_out <= DENIED
    assert {name: out[name] for name in kept_out} == dict.fromkeys(kept_out, errno.EPERM), out
    assert out["getcpu"] == errno.EPERM  # the default action: refused
    assert out["getpid"] == 0  # the probe itself works: an allowed call runs


@pytest.mark.parametrize("launcher", ["exec", "forkserver"])
def test_honest_grades_earn_1_with_both_launchers(stack: Stack, launcher: str) -> None:
    container = stack.containers("worker")[0]
    graded = _grade_in(container, _source(RIGHT), launcher=launcher)
    assert graded["launcher"] == launcher and graded["tier"] == "gvisor+seccomp", graded
    assert (graded["outcome"], graded["reward"]) == ("correct", 1.0), graded


def _bombed(graded: dict) -> None:
    """A memory bomb's cases end at the memory limit, or (a loaded host allocating slowly) at the
    time limit first; never passed, never a sandbox fault."""
    assert graded["reward"] == 0.0 and graded["outcome"] in ("memory", "incorrect"), graded
    assert "memory" in graded["counts"] and set(graded["counts"]) <= {"memory", "timeout"}, graded


@pytest.mark.parametrize("launcher", ["exec", "forkserver"])
def test_hostile_cases_keep_their_verdicts_under_the_profile(stack: Stack, launcher: str) -> None:
    container = stack.containers("worker")[0]
    # short limits, so a case that spins ends in seconds (the deployment's are 10 s CPU, 15 s wall)
    spin = _grade_in(container, _source(SPIN), launcher=launcher, cpu_seconds="2", wall_seconds="4")
    assert (spin["outcome"], spin["reward"], spin["tier"]) == ("timeout", 0.0, "gvisor+seccomp"), spin
    memory = _grade_in(container, _source(MEMORY_BOMB), launcher=launcher)
    _bombed(memory)
    forks = _grade_in(container, _source(FORK_BOMB), launcher=launcher, wall_seconds="5")
    assert forks["reward"] == 0.0 and forks["outcome"] in ("timeout", "incorrect"), forks
    assert set(forks["counts"]) <= {"timeout", "exception", "crashed"}, forks
    assert memory["tier"] == forks["tier"] == "gvisor+seccomp"
    # and the sandbox still grades honestly afterwards
    assert _grade_in(container, _source(RIGHT), launcher=launcher)["reward"] == 1.0


def test_hostile_completions_through_the_api_end_as_scored_zeros(client, stack: Stack) -> None:
    body = {"task_id": "impl/critical_batch_size", "all_or_nothing": True, "wait": 120}
    memory = client.post("/v1/grade", json={**body, "completion": MEMORY_BOMB}).json()
    _bombed({**memory, "counts": memory["details"].get("counts", {})})
    forks = client.post("/v1/grade", json={**body, "completion": FORK_BOMB}).json()
    assert forks["reward"] == 0.0 and forks["outcome"] in ("timeout", "incorrect"), forks["details"]
    assert forks["details"]["sandbox_tier"] == "gvisor+seccomp"


def test_the_health_check_passes_under_the_profile(stack: Stack) -> None:
    for container in stack.containers("worker"):
        run("docker", "exec", container, "python", "/opt/healthcheck.py", "worker", timeout=60)


@pytest.mark.parametrize("needed", ["pivot_root", "ptrace", "mount"])
def test_a_profile_without_a_call_runsc_needs_fails_closed(stack: Stack, tmp_path, needed: str) -> None:
    """Attack on the profile's maintenance: drop one call runsc needs and the worker must not
    fall back to a weaker tier: no tier, min tier not met (impl jobs refused, docs/deployment.md)."""
    narrower = render()
    for rule in narrower["syscalls"]:
        if needed in rule["names"]:
            rule["names"].remove(needed)
    profile = tmp_path / "narrower.json"
    profile.write_text(json.dumps(narrower))
    caps = [a for cap in ("SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SETUID", "SETGID", "DAC_OVERRIDE")
            for a in ("--cap-add", cap)]
    image = os.environ.get("WORKER_IMAGE", "scaling-grader/worker:local")
    out = run("docker", "run", "--rm", "--user", "0:0", "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/run",
              "--cap-drop", "ALL", *caps, "--security-opt", "no-new-privileges:true",
              "--security-opt", f"seccomp={profile}", "--security-opt", "apparmor=unconfined",
              "--env", "SCALING_GRADER_SANDBOX__TIER=gvisor", "--env", "SCALING_GRADER_SANDBOX__MIN_TIER=gvisor",
              image, "scaling-grader", "impl", "sandbox", check=False, timeout=300)
    report = json.loads(out)
    assert report["tier"] is None and report["meets_min_tier"] is False and report["ok"] is False, report
    assert all(not probe["ok"] for probe in report["probes"]), report
