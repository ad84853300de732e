"""The adversarial suite: every attack, under every tier this machine offers, is scored 0 with a
clear verdict, leaks nothing, leaves nothing running, and leaves the service unharmed."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from app.graders.impl_verdict import decode, judge_case
from app.sandbox.executor import CaseRun
from app.sandbox.pool import Sandbox
from app.sandbox.uids import processes_of
from app.tasks.impl.spec import Case
from tests.sandbox.attacks import ALL, OS_LAYER, Attack, code
from tests.sandbox.tiers import (
    LANDLOCK,
    PRIVATE_TIERS,
    SHORT_LIMITS,
    attack_matrix,
    box_for,
    launched_tiers,
    offered_tiers,
    tier_settings,
)

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# A value no attack can know: the only way to "pass" would be a forged result.
UNGUESSABLE = Case(args=(), expected="expected-" + os.urandom(6).hex())
# Under the OS layers alone, these checks hold only where the filesystem is private.
_PRIVATE_FS_ONLY = {"spawn_subprocess"}
# Filling hundreds of MiB costs about the tests' 1 s CPU allowance under gVisor (each page fault
# goes through its kernel and is charged to the task): on a loaded machine the CPU limit may end
# the case before the address-space limit or the result cap does. Either way it scores 0.
_CPU_BOUND_UNDER_GVISOR = {"return_huge_list", "memory_bomb"}


def _observed(run: CaseRun) -> Any:
    result = (run.final or {}).get("result") or {}
    return decode(result.get("value")) if result.get("kind") == "value" else None


def _attack(box: Sandbox, attack: Attack, targets: Any) -> tuple[CaseRun, dict[str, Any]]:
    start = time.monotonic()
    run = box.run(attack.source, "attack", attack.args(targets), profile="numpy")
    elapsed = time.monotonic() - start
    verdict = judge_case(UNGUESSABLE, run, 1e-6, SHORT_LIMITS["cpu_seconds"])
    # The parent is unharmed: it is still here, and the case ended within the wall limit
    # plus the time it takes to tear a sandbox down.
    assert elapsed < SHORT_LIMITS["wall_seconds"] + 5
    # Nothing the case started survives it.
    uid = run.extra.get("uid")
    if uid is not None:
        assert processes_of(uid) == []
    assert run.extra.get("host_processes_left", 0) == 0  # the gvisor tier's runsc processes
    return run, verdict


# With the guards on, the attacks of OS_LAYER are stopped in Python before the process layer: the
# exec launcher meets them in the test below, without the guards.
@pytest.mark.parametrize(("tier", "attack"), attack_matrix(launched_tiers(), ALL, neutral={a.name for a in OS_LAYER}))
def test_attack_is_contained(tier: str, attack: Attack, targets: Any) -> None:
    run, verdict = _attack(box_for(tier), attack, targets)
    verdicts = attack.verdicts
    if tier.startswith("gvisor") and attack.name in _CPU_BOUND_UNDER_GVISOR:
        verdicts = verdicts | {"timeout"}
    assert verdict["verdict"] in verdicts, (verdict, run.fault, run.stderr[-300:])
    assert run.tier == tier
    if attack.check is not None:
        attack.check(_observed(run), targets, tier)


@pytest.mark.parametrize(("os_tier", "attack"), attack_matrix([t for t in launched_tiers() if t != "plain"], OS_LAYER))
def test_attack_is_contained_without_python_guards(os_tier: str, attack: Attack, targets: Any) -> None:
    run, verdict = _attack(box_for(os_tier, guards=False), attack, targets)
    assert verdict["verdict"] != "passed"
    assert verdict["verdict"] in attack.verdicts | {"wrong", "crashed"}, (verdict, run.fault)
    if attack.check is not None and (attack.name not in _PRIVATE_FS_ONLY or os_tier.startswith(PRIVATE_TIERS)):
        attack.check(_observed(run), targets, os_tier)


@pytest.mark.filter_neutral
def test_background_process_is_killed_after_the_case(tier: str, targets: Any) -> None:
    source = (
        "import os, time\ndef attack():\n    pid = os.fork()\n    if pid == 0:\n        os.setsid()\n"
        "        time.sleep(600)\n        os._exit(0)\n    return pid\n"
    )
    run = box_for(tier, guards=False).run(source, "attack", [], profile="numpy")
    assert isinstance(_observed(run), int)  # the fork really happened
    if tier.startswith("gvisor") and run.extra["launcher"] == "forkserver":
        # in the lane's sandbox: the case's leader saw its pid namespace empty before it ended
        assert run.extra["case_namespace_emptied"] is True
        return
    if tier.startswith("gvisor"):  # the fork lived in gVisor's kernel: it went with its processes
        assert run.extra["host_pids"] and run.extra["host_processes_left"] == 0
        return
    uid = run.extra["uid"]
    assert uid is not None and processes_of(uid) == []


@pytest.mark.filter_neutral
def test_fork_bomb_is_capped_by_the_process_limit(tier: str) -> None:
    source = (
        "import os\ndef attack():\n    n = 0\n    try:\n        while n < 1000:\n"
        "            if os.fork() == 0:\n                import time; time.sleep(30); os._exit(0)\n"
        "            n += 1\n    except OSError:\n        return n\n    return n\n"
    )
    run = box_for(tier, guards=False).run(source, "attack", [], profile="numpy")
    forked = _observed(run)
    assert forked == SHORT_LIMITS["max_processes"]


@pytest.mark.filter_neutral
def test_candidate_runs_unprivileged_with_scrubbed_environment(tier: str, targets: Any) -> None:
    source = (
        "import os\ndef attack():\n"
        "    return [os.getuid(), os.geteuid(), os.getcwd(), sorted(os.environ), os.listdir('.')]\n"
    )
    run = box_for(tier).run(source, "attack", [], profile="numpy")
    uid, euid, cwd, env, listing = _observed(run)
    assert uid != 0 and euid != 0
    # Only what the sandbox sets (PWD comes from the launcher's shell); nothing of the service's.
    assert set(env) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "JAX_PLATFORMS", "XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL",
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX", "PWD",
    }
    assert {"HOME", "XLA_FLAGS"} <= set(env)
    assert listing == []  # a fresh, empty working directory
    if tier.startswith("bubblewrap"):
        assert cwd == "/tmp/work"


def test_seccomp_really_denies_calls(tier: str) -> None:
    source = code("""
        import ctypes, os
        def attack():
            libc = ctypes.CDLL(None, use_errno=True)
            return 'ok' if libc.unshare(0) == 0 else os.strerror(ctypes.get_errno())
        """)
    run = box_for(tier, guards=False).run(source, "attack", [], profile="numpy")
    observed = _observed(run)
    # unshare(0) changes nothing and always succeeds, unless a filter refuses the call itself.
    if tier.endswith("+seccomp"):
        assert observed == "Operation not permitted"
        assert run.armed and run.armed["seccomp"] is True
    else:
        assert observed == "ok"


@pytest.mark.filter_neutral
def test_a_warm_child_that_died_while_idle_is_replaced(tier: str) -> None:
    box = box_for(tier)
    box.prewarm("numpy")
    with box._cv:
        victim = box._warm["numpy"][0]
    victim.popen.kill()
    victim.popen.wait()
    source = "def attack():\n    return 7\n"
    runs = [box.run(source, "attack", [], profile="numpy") for _ in range(3)]
    assert [_observed(r) for r in runs] == [7, 7, 7]


@pytest.mark.filter_neutral
def test_bubblewrap_namespaces_are_private(tier: str) -> None:
    source = code("""
        import os
        def attack():
            with open('/proc/net/dev') as f:
                interfaces = sorted(line.split(':')[0].strip() for line in f.readlines()[2:])
            pids = [p for p in os.listdir('/proc') if p.isdigit()]
            try:
                root = sorted(os.listdir('/'))
            except PermissionError:
                root = 'denied'
            return [os.getpid(), os.uname().nodename, root, len(pids), interfaces]
        """)
    run = box_for(tier).run(source, "attack", [], profile="numpy")
    pid, hostname, root, n_pids, interfaces = _observed(run)
    if tier.startswith(PRIVATE_TIERS):
        assert pid < 10 and n_pids <= 4  # its own pid namespace: init, reporter, runner
        assert hostname == "sandbox"
        assert interfaces == ["lo"]  # its own network namespace, nothing but loopback
        # (gvisor: /run holds the result socket's directory, read-only; /sys is gVisor's own)
        assert set(root) <= {"bin", "dev", "etc", "lib", "lib64", "proc", "root", "run", "sandbox", "sys", "tmp",
                             "usr"}
    else:
        assert n_pids > 4  # the plain tier shares the host's pid namespace, as documented
        # and the host's root, which its Landlock rules do not let it list (where the kernel has it)
        assert (root == "denied") == LANDLOCK, root


@pytest.mark.filter_neutral
def test_sandbox_processes_hold_no_privilege(tier: str) -> None:
    """While a case runs, every process under the dedicated uid range is unprivileged."""
    import threading

    sb = tier_settings(tier)
    if os.geteuid() != 0:  # no dedicated uids without root: children share the service's uid
        assert box_for(tier)._uids is None
        return
    if tier.startswith("gvisor"):
        # No host uid of the pool: the case's processes live in gVisor's kernel, where
        # test_every_process_of_the_sandbox_runs_under_the_filter finds them unprivileged.
        # (Forked in a lane's sandbox, the case's uid in gVisor's kernel is one of the pool's.)
        run = box_for(tier).run("import os\ndef attack():\n    return os.getuid()\n", "attack", [])
        assert run.extra["uid"] in (None, _observed(run)) and _observed(run) not in (None, 0)
        return
    done = threading.Event()
    seen: dict[int, tuple[int, str]] = {}

    def watch() -> None:
        while not done.is_set():
            for entry in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{entry}/status") as f:
                        status = dict(line.split(":", 1) for line in f)
                except (OSError, ValueError):
                    continue
                uid = int(status["Uid"].split()[0])
                if sb.uid_base <= uid < sb.uid_base + sb.uid_count:
                    seen[int(entry)] = (uid, status["CapEff"].strip())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    run = box_for(tier).run("import time\ndef attack():\n    time.sleep(1)\n    return 1\n", "attack", [])
    done.set()
    watcher.join()
    assert _observed(run) == 1
    # The case's own processes. (A warm child starting meanwhile holds capabilities inside its
    # new user namespace while bubblewrap sets it up, before anything of a case is there.)
    case = [caps for uid, caps in seen.values() if uid == run.extra["uid"]]
    assert len(case) >= 2 and set(case) == {"0000000000000000"}


def test_address_space_limit_counts_from_the_warm_state() -> None:
    """With JAX loaded the child already maps far more than the 512 MiB test allowance; the
    allowance is on top of that: 256 MiB fits, 768 MiB does not."""
    tier = offered_tiers()[0]
    source = code("""
        import jax
        def attack(mib):
            return len(bytearray(mib << 20)) >> 20
        """)
    box = box_for(tier)
    fits = box.run(source, "attack", [256], profile="jax")
    too_big = box.run(source, "attack", [768], profile="jax")
    assert _observed(fits) == 256
    assert judge_case(UNGUESSABLE, too_big, 1e-6, SHORT_LIMITS["cpu_seconds"])["verdict"] == "memory"
    assert fits.armed and fits.armed["limits"]["address_space_bytes"] > 1024**3
