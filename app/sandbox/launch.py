"""Start one sandbox child in a given isolation tier, and destroy it afterwards.

Tiers: ``bubblewrap`` (new user, pid, ipc, uts, network, mount and cgroup namespaces; only the
interpreter, the needed site-packages and system libraries bound read-only; a private size-capped
tmpfs /tmp) and ``plain`` (a scrubbed ``python -I`` child). Both add the seccomp deny-list when
asked, and, when the service is root, run under a dedicated unprivileged uid."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.sandbox.plan import SITE_IN_SANDBOX, Plan
from app.sandbox.uids import UidPool, processes_of

if TYPE_CHECKING:
    from app.settings import SandboxSettings

SANDBOX_UID = 65534  # the uid the candidate sees inside the bubblewrap tier
# Bind-mount each staged source onto its mountpoint, then exec the rest of argv. Only our own
# paths are ever passed here, as positional parameters, never interpolated.
_STAGE_SCRIPT = (
    'while [ "$1" != "--" ]; do mount --bind "$1" "$2" || exit 97; shift 2; done; shift; exec "$@"'
)
PROFILES = ("bare", "numpy", "jax")


class SandboxFault(Exception):
    """The sandbox itself failed (a child could not start or died before candidate code)."""


@cache
def harness_source() -> str:
    here = Path(__file__).parent
    parts = ("child_seccomp.py", "child_values.py", "child_runner.py", "child_harness.py")
    return "\n".join([*((here / name).read_text() for name in parts), "main()\n"])


@dataclass
class Child:
    popen: subprocess.Popen[bytes]
    result_fd: int
    tier: str
    seccomp: bool
    profile: str
    uid: int | None
    workdir: str | None
    started: float
    ready: dict[str, Any] | None = None
    pending: bytes = b""
    lines: list[dict[str, Any]] = field(default_factory=list)


def _env(sb: SandboxSettings, home: str, tmp: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={sb.host_devices}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # One BLAS/OpenMP thread: cases run side by side, and threads count against RLIMIT_NPROC.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _drop_privileges_prefix(plan: Plan, uid: int) -> list[str]:
    tools = plan.tools
    if "setpriv" not in tools or (plan.staged and not {"unshare", "sh"} <= tools.keys()):
        raise SandboxFault("running as root needs util-linux setpriv (and unshare) to drop privileges")
    argv: list[str] = []
    if plan.staged:
        argv += [tools["unshare"], "--mount", "--propagation", "private", "--"]
        argv += [tools["sh"], "-c", _STAGE_SCRIPT, "stage"]
        for source, point in plan.staged.items():
            argv += [source, point]
        argv.append("--")
    argv += [tools["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    return argv


def _bwrap_argv(plan: Plan, sb: SandboxSettings) -> list[str]:
    if "bwrap" not in plan.tools:
        raise SandboxFault("bubblewrap is not installed")
    argv = [
        plan.tools["bwrap"], "--unshare-all", "--die-with-parent", "--new-session",
        "--hostname", "sandbox", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
    ]
    for b in plan.system_binds:
        argv += ["--ro-bind", b.source, b.target]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
        if os.path.islink(link):
            argv += ["--symlink", target, link]
    argv += ["--ro-bind", plan.visible(plan.prefix), plan.prefix]
    for b in plan.site_binds:
        argv += ["--ro-bind", plan.visible(b.source), b.target]
    argv += [
        "--proc", "/proc", "--dev", "/dev",
        "--perms", "1777", "--size", str(sb.tmpfs_bytes), "--tmpfs", "/tmp",
        "--dir", "/tmp/work", "--dir", "/tmp/home", "--chdir", "/tmp/work",
        "--remount-ro", "/", "--",
    ]
    return argv


def spawn(
    plan: Plan, sb: SandboxSettings, tier: str, seccomp: bool, profile: str, uids: UidPool | None
) -> Child:
    """Start a child that warms up for profile and then waits for one case on stdin."""
    uid = uids.take() if uids is not None else None
    workdir = None
    read_end, write_end = os.pipe()
    try:
        cfg: dict[str, Any] = {
            "result_fd": write_end,
            "preload": profile,
            "seccomp": seccomp,
            "python_guards": sb.python_guards,
            "dedicated_uid": uid is not None,
            "reap_all": uid is not None,
            "max_result_bytes": sb.max_result_bytes,
            "max_result_items": sb.max_result_items,
        }
        prefix = _drop_privileges_prefix(plan, uid) if uid is not None else []
        if tier == "bubblewrap":
            cfg["sys_path"] = [SITE_IN_SANDBOX]
            env = _env(sb, "/tmp/home", "/tmp")
            argv = [*prefix, *_bwrap_argv(plan, sb), plan.python]
            cwd = None
        else:
            cfg["sys_path"] = [plan.visible(d) for d in plan.site_dirs]
            workdir = tempfile.mkdtemp(prefix="scaling-grader-case-")
            cwd, home = os.path.join(workdir, "work"), os.path.join(workdir, "home")
            for d in (cwd, home):
                os.mkdir(d, 0o700)
                if uid is not None:
                    os.chown(d, uid, uid)
            env = _env(sb, home, cwd)
            argv = [*prefix, plan.visible(plan.python)]
        argv += ["-I", "-S", "-B", "-c", harness_source(), json.dumps(cfg)]
        popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(write_end,), cwd=cwd, env=env, start_new_session=True,
        )
    except BaseException:
        os.close(read_end)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        if uid is not None and uids is not None:
            uids.give_back(uid)
        raise
    finally:
        os.close(write_end)
    for f in (popen.stdout, popen.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
    return Child(popen, read_end, tier, seccomp, profile, uid, workdir, time.monotonic())


def read_messages(child: Child, timeout: float) -> bool:
    """Read what the result fd has within timeout into child.lines; False on end of file."""
    ready, _, _ = select.select([child.result_fd], [], [], max(timeout, 0))
    if not ready:
        return True
    data = os.read(child.result_fd, 1 << 16)
    if not data:
        return False
    child.pending += data
    *complete, child.pending = child.pending.split(b"\n")
    for line in complete:
        try:
            child.lines.append(json.loads(line))
        except (ValueError, RecursionError):  # the reporter writes only JSON lines; a value nested
            # deeper than this thread's stack allows (forged by the candidate) is garbled too
            child.lines.append({"kind": "garbled"})
    return True


def stderr_tail(child: Child, limit: int = 2000) -> str:
    try:
        data = os.read(child.popen.stderr.fileno(), 65536)  # type: ignore[union-attr]
    except (BlockingIOError, OSError, ValueError):
        data = b""
    return data[-limit:].decode(errors="replace").strip()


def wait_ready(child: Child, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not child.lines:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SandboxFault(f"child did not become ready within {timeout:.0f} s")
        if not read_messages(child, remaining):
            raise SandboxFault(f"child exited during start-up: {stderr_tail(child) or 'no message'}")
    first = child.lines.pop(0)
    if first.get("kind") != "ready":
        raise SandboxFault(f"child failed during start-up: {stderr_tail(child) or first.get('kind')}")
    child.ready = first
    return first


def reap_uid(uid: int) -> None:
    """Kill every process of a dedicated uid: ``kill(-1)`` run as that uid reaches all of them
    and nothing else. Repeated until /proc shows none (a dying process can linger briefly)."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    for _ in range(50):
        if not processes_of(uid):
            return
        if kill:
            subprocess.run([kill, "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        else:
            for pid in processes_of(uid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def destroy(child: Child, uids: UidPool | None) -> None:
    """Kill the child and everything it started; free its uid and working directory."""
    with contextlib.suppress(OSError):
        os.killpg(child.popen.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        child.popen.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.popen.wait(timeout=10)
    for f in (child.popen.stdin, child.popen.stdout, child.popen.stderr):
        with contextlib.suppress(OSError):
            if f is not None:
                f.close()
    with contextlib.suppress(OSError):
        os.close(child.result_fd)
    if child.uid is not None:
        reap_uid(child.uid)
        if uids is not None and not processes_of(child.uid):
            uids.give_back(child.uid)
    if child.workdir:
        shutil.rmtree(child.workdir, ignore_errors=True)
