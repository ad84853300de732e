"""The OCI bundle of one gvisor-tier child: the same minimal view of the host as the bubblewrap
tier (the interpreter, the needed site-packages and the system libraries, all read-only, on a
read-only empty root), a private size-capped /tmp and /dev/shm, a read-only /proc, no network
and no capability but the two the harness needs to split itself into two unprivileged uids.

Pure data: gvisor.py writes it as the bundle's config.json and starts ``runsc run`` on it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.sandbox.plan import Bind, Plan

if TYPE_CHECKING:
    from app.settings import SandboxSettings

RESULT_DIR = "/run/grader"  # where the parent's result socket is seen inside
# The harness starts as the sandbox kernel's root only to drop into two uids (see child_harness).
_HARNESS_CAPS = ["CAP_SETUID", "CAP_SETGID"]
_SYMLINKS = (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin"))


def read_only_binds(plan: Plan) -> list[Bind]:
    """Host paths the child sees, each read-only at its target (as bubblewrap binds them)."""
    return [*plan.system_binds, Bind(plan.prefix, plan.prefix), *plan.site_binds]


def root_symlinks() -> list[tuple[str, str]]:
    """The merged-/usr links of the host (/bin -> usr/bin...), recreated in the empty root."""
    return [(link, target) for link, target in _SYMLINKS if os.path.islink(link)]


def _bind(source: str, target: str, *, writable: bool = False) -> dict[str, Any]:
    options = ["rbind", "nosuid", "nodev", "rw" if writable else "ro"]
    return {"destination": target, "type": "bind", "source": source, "options": options}


def _tmpfs(target: str, size: int) -> dict[str, Any]:
    return {"destination": target, "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", f"size={size}"]}


def bundle_config(plan: Plan, sb: SandboxSettings, *, rootfs: str, result_dir: str, args: list[str],
                  env: dict[str, str], cwd: str, caps: tuple[str, ...] = ()) -> dict[str, Any]:
    """config.json for one child (or, with the fork server's ``caps``, for one lane's fork server:
    gvisor_zygote.py). ``result_dir`` (the host directory of the service's socket) is bound
    read-only: the harness connects to the socket there, it cannot replace it."""
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev", "ro"]},
        _tmpfs("/tmp", sb.tmpfs_bytes),
        _tmpfs("/dev/shm", sb.shm_bytes),
        *(_bind(b.source, b.target) for b in read_only_binds(plan)),
        _bind(result_dir, RESULT_DIR),
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": cwd,
            "noNewPrivileges": True,
            "capabilities": {k: list(caps or _HARNESS_CAPS) for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
        },
        "root": {"path": rootfs, "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            # No cgroup of runsc's own: the child runs in the case's group, where there is one.
            "maskedPaths": [],
            "readonlyPaths": [],
        },
    }


def make_root(rootfs: str, binds: list[Bind], extra_dirs: tuple[str, ...]) -> None:
    """An empty root with a mount point for every bind (a directory or an empty file, as the
    source is) and the host's merged-/usr links; everything root-owned and read-only."""
    for link, target in root_symlinks():
        os.symlink(target, rootfs + link)
    for b in binds:
        point = Path(rootfs + b.target)
        point.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if os.path.isdir(b.source):
            point.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif not point.exists():
            point.touch(0o444)
    for d in extra_dirs:
        Path(rootfs + d).mkdir(mode=0o755, parents=True, exist_ok=True)
    for dirpath, dirnames, _ in os.walk(rootfs):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
