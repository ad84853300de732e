"""A tier's sandbox as data: what the case sees (mounts), what it is cut off from (namespaces),
who it runs as, and what bounds it beyond the case's own limits. One ``Policy`` per tier and
launch (a started child, or a fork server), built by the tier's module and rendered here: into
bubblewrap's command line, into the OCI runtime spec ``runsc`` reads, or (the plain tier, which
mounts nothing) into the Landlock rules that let its case open only what the policy shows.

The renderers hold no policy of their own: every mount, namespace and capability in their output
comes from the data, in its order (bubblewrap applies its options one after another)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from app.sandbox.plan import Plan

MountKind = Literal["bind", "tmpfs", "proc", "dev", "dir", "symlink"]
# bubblewrap's flag per namespace it is told to make (the cgroup namespace only where the kernel
# has one); the user namespace is rendered apart, with the uid the case sees in it.
_BWRAP_UNSHARE = {
    "pid": "--unshare-pid",
    "net": "--unshare-net",
    "ipc": "--unshare-ipc",
    "uts": "--unshare-uts",
    "cgroup": "--unshare-cgroup-try",
}
_OCI_NAMESPACE = {"pid": "pid", "net": "network", "ipc": "ipc", "uts": "uts", "mount": "mount"}
# The merged-/usr links a host may have (/bin -> usr/bin...), recreated inside the sandbox.
_USR_LINKS = (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin"))


@dataclass(frozen=True)
class Mount:
    """One thing placed in the sandbox's filesystem, at ``target``.

    ``bind``: the host's ``source``; ``tmpfs`` of ``size`` bytes; ``proc``; ``dev`` (a minimal
    /dev); ``dir`` (an empty directory); ``symlink`` (``target`` -> ``source``). A read-only
    mount is made read-only once what is mounted ``inside`` it is in place. ``mode``: the
    permissions of a tmpfs or directory."""

    kind: MountKind
    target: str
    source: str = ""
    read_only: bool = True
    size: int | None = None
    mode: str | None = None
    inside: tuple[Mount, ...] = ()


@dataclass(frozen=True)
class Policy:
    """Everything a tier sets up around one process of the sandbox, as data.

    ``namespaces``: of pid, net, ipc, uts, cgroup, mount, user. ``uid``: the uid the process
    sees inside a user namespace. ``caps``: capabilities it keeps (none where empty; the OCI
    spec then gives the harness's own two). ``nested_userns``: whether the process may make
    user namespaces of its own. ``seccomp``: whether the deny-list is installed (the channel
    filter always is: child/channels.py). ``nproc_margin``: added to RLIMIT_NPROC (a kernel
    that counts one task more than Linux does needs one fewer). ``host_tasks``: host tasks the
    tier itself adds to a case (a user-space kernel's threads), allowed in the case's group."""

    mounts: tuple[Mount, ...]
    namespaces: frozenset[str]
    seccomp: bool
    hostname: str = "sandbox"
    uid: int | None = None
    caps: tuple[str, ...] = ()
    nested_userns: bool = False
    read_only_root: bool = True
    cwd: str | None = None
    nproc_margin: int = 0
    host_tasks: int = 0

    def all_mounts(self) -> list[Mount]:
        """Every mount, those inside others included, in the order they are made."""
        out: list[Mount] = []

        def walk(mounts: tuple[Mount, ...]) -> None:
            for m in mounts:
                out.append(m)
                walk(m.inside)

        walk(self.mounts)
        return out


def usr_links() -> list[Mount]:
    """The host's merged-/usr links, as symlinks to recreate inside."""
    return [Mount("symlink", link, source=target) for link, target in _USR_LINKS if os.path.islink(link)]


def host_view(plan: Plan, *, staged: bool) -> list[Mount]:
    """What every isolating tier shows of the host, read-only: the system libraries, the merged-
    /usr links, the interpreter's prefix and the configured packages' site-packages entries.
    ``staged``: bind the staged copies of paths a dedicated uid cannot reach (plan.py)."""
    visible = plan.visible if staged else (lambda p: p)
    return [
        *(Mount("bind", b.target, source=b.source) for b in plan.system_binds),
        *usr_links(),
        Mount("bind", plan.prefix, source=visible(plan.prefix)),
        *(Mount("bind", b.target, source=visible(b.source)) for b in plan.site_binds),
    ]


# ---------------------------------------------------------------------------- bubblewrap


def _bwrap_mount(m: Mount) -> list[str]:
    argv: list[str] = []
    if m.kind == "bind":
        argv += ["--ro-bind" if m.read_only else "--bind", m.source, m.target]
    elif m.kind == "symlink":
        argv += ["--symlink", m.source, m.target]
    elif m.kind in ("dir", "tmpfs"):
        if m.mode is not None:
            argv += ["--perms", m.mode]
        if m.size is not None:
            argv += ["--size", str(m.size)]
        argv += ["--dir" if m.kind == "dir" else "--tmpfs", m.target]
    else:  # proc, dev
        argv += [f"--{m.kind}", m.target]
    for inner in m.inside:
        argv += _bwrap_mount(inner)
    if m.read_only and m.kind in ("proc", "dev", "tmpfs"):
        argv += ["--remount-ro", m.target]
    return argv


def bwrap_args(policy: Policy, bwrap: str) -> list[str]:
    """bubblewrap's command line for policy, up to and including the ``--`` before the program."""
    argv = [bwrap, *(flag for ns, flag in _BWRAP_UNSHARE.items() if ns in policy.namespaces)]
    # --as-pid-1: the program is the namespace's init, not a reaper of bubblewrap's that would run
    # outside the filter and the limits.
    argv += ["--die-with-parent", "--new-session", "--as-pid-1", "--hostname", policy.hostname]
    for cap in policy.caps:
        argv += ["--cap-add", cap]
    if "user" in policy.namespaces:
        argv.append("--unshare-user")
        if not policy.nested_userns:
            argv.append("--disable-userns")
        if policy.uid is not None:
            argv += ["--uid", str(policy.uid), "--gid", str(policy.uid)]
    for m in policy.mounts:
        argv += _bwrap_mount(m)
    if policy.cwd is not None:
        argv += ["--chdir", policy.cwd]
    if policy.read_only_root:
        argv += ["--remount-ro", "/"]
    return [*argv, "--"]


# ---------------------------------------------------------------------------- Landlock (plain)

# The device files of bubblewrap's minimal /dev (its --dev) that a case reads and writes; nothing
# else of the host's /dev (its /dev/shm and /dev/mqueue hold other processes' files) is a plain
# case's to open or list.
DEV_NODES = ("null", "zero", "full", "random", "urandom")


def landlock_rules(policy: Policy) -> list[list[str]]:
    """The Landlock rules (child/landlock.py: ``[access, path]``) that give a process of the host,
    with no mount namespace of its own (the plain tier), what policy would show it: each bind's
    host ``source`` (read and execute where it is read-only; everything where writable), a
    ``dir`` listed but none of its files opened (what is in it comes from other rules), /proc read,
    of /dev only bubblewrap's minimal devices (read and written), a writable tmpfs's target fully.
    The host's own merged-/usr links need no rule: the kernel checks the path they lead to."""
    rules: list[list[str]] = []
    for m in policy.all_mounts():
        if m.kind == "bind":
            rules.append(["read" if m.read_only else "full", m.source])
        elif m.kind == "dir":
            rules.append(["list", m.target])
        elif m.kind == "proc":
            rules.append(["read", m.target])
        elif m.kind == "dev":
            rules += [["device", f"{m.target}/{node}"] for node in DEV_NODES]
        elif m.kind == "tmpfs":
            rules.append(["read" if m.read_only else "full", m.target])
    return rules


# ---------------------------------------------------------------------------- OCI (runsc)

# The harness starts as the sandbox kernel's root only to drop into two uids (child/harness.py).
HARNESS_CAPS = ("CAP_SETUID", "CAP_SETGID")


def _oci_mount(m: Mount) -> dict[str, Any] | None:
    if m.kind == "bind":
        options = ["rbind", "nosuid", "nodev", "ro" if m.read_only else "rw"]
        return {"destination": m.target, "type": "bind", "source": m.source, "options": options}
    if m.kind == "tmpfs":
        options = ["nosuid", "nodev", f"mode={m.mode}", f"size={m.size}"]
        return {"destination": m.target, "type": "tmpfs", "source": "tmpfs", "options": options}
    if m.kind == "proc":
        return {
            "destination": m.target,
            "type": "proc",
            "source": "proc",
            "options": ["nosuid", "noexec", "nodev", "ro" if m.read_only else "rw"],
        }
    return None  # directories and symlinks live in the root itself (make_root); /dev is runsc's


def oci_spec(policy: Policy, *, rootfs: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The OCI runtime spec (a bundle's config.json) for policy. The process starts as the
    sandbox kernel's root with policy's capabilities and no_new_privs; no cgroup of runsc's own
    (the service puts the sandbox in the case's group, where there is one)."""
    mounts = [spec for m in policy.all_mounts() if (spec := _oci_mount(m)) is not None]
    caps = list(policy.caps or HARNESS_CAPS)
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": policy.cwd or "/",
            "noNewPrivileges": True,
            "capabilities": {k: list(caps) for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
        },
        "root": {"path": rootfs, "readonly": policy.read_only_root},
        "hostname": policy.hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": oci} for ns, oci in _OCI_NAMESPACE.items() if ns in policy.namespaces],
            "maskedPaths": [],
            "readonlyPaths": [],
        },
    }
