"""Each tier's policy data, rendered: the exact bubblewrap command line and OCI spec the sandbox
used before its policy became data (the old builders are kept below, verbatim, as the oracle),
and the properties that hold whatever the data says (every mount appears, read-only where
declared; no namespace or capability the data does not name)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.sandbox.plan import Bind, Plan
from app.sandbox.policy import Mount, Policy, bwrap_args, oci_spec
from app.sandbox.tiers import get_tier
from app.sandbox.tiers.runsc import ZYGOTE_CAPS, gvisor_spec
from app.settings import SandboxSettings

SANDBOX_UID = 65534


# ---------------------------------------------------------------- the builders as they were


def old_bwrap_argv(plan: Plan, sb: SandboxSettings, *, zygote: bool = False) -> list[str]:
    argv = [
        plan.tools["bwrap"],
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--hostname",
        "sandbox",
    ]
    if zygote:
        for cap in ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN"):
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if zygote:
        targets = [*(b.target for b in plan.system_binds), plan.prefix, *(b.target for b in plan.site_binds)]
        parents = {str(p) for t in targets for p in Path(t).parents if str(p) != "/"}
        for d in sorted(parents, key=lambda p: p.count("/")):
            argv += ["--perms", "0755", "--dir", d]
    for b in plan.system_binds:
        argv += ["--ro-bind", b.source, b.target]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
        if os.path.islink(link):
            argv += ["--symlink", target, link]
    argv += ["--ro-bind", plan.visible(plan.prefix), plan.prefix]
    for b in plan.site_binds:
        argv += ["--ro-bind", plan.visible(b.source), b.target]
    argv += [
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        "--ro-bind",
        "/dev/null",
        "/proc/locks",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(sb.shm_bytes),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(sb.tmpfs_bytes),
        "--tmpfs",
        "/tmp",
    ]
    if not zygote:
        argv += ["--dir", "/tmp/work", "--dir", "/tmp/home", "--chdir", "/tmp/work"]
    argv += ["--remount-ro", "/", "--"]
    return argv


def _old_bind(source: str, target: str) -> dict[str, Any]:
    return {"destination": target, "type": "bind", "source": source, "options": ["rbind", "nosuid", "nodev", "ro"]}


def _old_tmpfs(target: str, size: int) -> dict[str, Any]:
    return {
        "destination": target,
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "nodev", "mode=1777", f"size={size}"],
    }


def old_bundle_config(
    plan: Plan,
    sb: SandboxSettings,
    *,
    rootfs: str,
    result_dir: str,
    args: list[str],
    env: dict[str, str],
    cwd: str,
    caps: tuple[str, ...] = (),
) -> dict[str, Any]:
    binds = [*plan.system_binds, Bind(plan.prefix, plan.prefix), *plan.site_binds]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev", "ro"]},
        _old_tmpfs("/tmp", sb.tmpfs_bytes),
        _old_tmpfs("/dev/shm", sb.shm_bytes),
        *(_old_bind(b.source, b.target) for b in binds),
        _old_bind(result_dir, "/run/grader"),
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
            "capabilities": {
                k: list(caps or ["CAP_SETUID", "CAP_SETGID"]) for k in ("bounding", "effective", "permitted")
            },
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
        },
        "root": {"path": rootfs, "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": [],
            "readonlyPaths": [],
        },
    }


# ---------------------------------------------------------------- plans to render


def _plans() -> list[Plan]:
    """Plans of different shapes: none staged, some staged (root with a hidden prefix), none
    with site-packages; paths that need parent directories of their own."""
    site = [
        Bind("/opt/py/lib/site-packages/numpy", "/sandbox/site/numpy"),
        Bind("/opt/py/lib/site-packages/numpy.libs", "/sandbox/site/numpy.libs"),
    ]
    system = [Bind("/usr/lib", "/usr/lib"), Bind("/etc/ld.so.cache", "/etc/ld.so.cache")]
    tools = {"bwrap": "/usr/bin/bwrap", "runsc": "/usr/bin/runsc"}
    return [
        Plan("/opt/py/bin/python3", "/opt/py", site, ["/opt/py/lib/site-packages"], system, False, tools=tools),
        Plan(
            "/root/.pyenv/bin/python3",
            "/root/.pyenv",
            site,
            ["/opt/py/lib/site-packages"],
            system,
            True,
            staging_dir="/tmp/stage",
            staged={"/root/.pyenv": "/tmp/stage/s0", "/opt/py/lib/site-packages": "/tmp/stage/s1"},
            tools=tools,
        ),
        Plan("/usr/bin/python3", "/usr", [], [], [Bind("/usr/lib", "/usr/lib")], True, tools=tools),
    ]


SETTINGS = [SandboxSettings(), SandboxSettings(tmpfs_bytes=1 << 20, shm_bytes=12345)]
CASES = [(p, sb) for p in _plans() for sb in SETTINGS]


@pytest.mark.parametrize(("plan", "sb"), CASES)
@pytest.mark.parametrize("seccomp", [True, False])
def test_bubblewrap_child_renders_todays_command_line(plan: Plan, sb: SandboxSettings, seccomp: bool) -> None:
    policy = get_tier("bubblewrap").policy(plan, sb, seccomp)
    assert policy is not None
    assert bwrap_args(policy, plan.tools["bwrap"]) == old_bwrap_argv(plan, sb)


@pytest.mark.parametrize(("plan", "sb"), CASES)
def test_bubblewrap_fork_server_renders_todays_command_line(plan: Plan, sb: SandboxSettings) -> None:
    policy = get_tier("bubblewrap").policy(plan, sb, True, fork_server=True)
    assert policy is not None
    assert bwrap_args(policy, plan.tools["bwrap"]) == old_bwrap_argv(plan, sb, zygote=True)


@pytest.mark.parametrize(("plan", "sb"), CASES)
@pytest.mark.parametrize("fork_server", [False, True])
def test_gvisor_renders_todays_oci_spec(plan: Plan, sb: SandboxSettings, fork_server: bool) -> None:
    args, env = ["/opt/py/bin/python3", "-I", "-c", "pass"], {"PATH": "/usr/bin", "HOME": "/tmp"}
    caps = ZYGOTE_CAPS if fork_server else ()
    cwd = "/" if fork_server else "/tmp"
    policy = get_tier("gvisor").policy(plan, sb, True, fork_server=fork_server)
    assert policy is not None
    got = gvisor_spec(policy, rootfs="/r", result_dir="/chan", args=args, env=env)
    assert got == old_bundle_config(plan, sb, rootfs="/r", result_dir="/chan", args=args, env=env, cwd=cwd, caps=caps)


def old_plain_landlock_rules(plan: Plan, paths: dict[str, str]) -> list[list[str]]:
    """The plain tier's Landlock rules written out from the plan by hand (the oracle): what the
    bubblewrap tier binds, opened in place (staged where the plan stages it), its sys.path's
    directory listed, /proc and /dev read, bubblewrap's devices read and written, the case's own
    directories fully."""
    rules = [["read", b.source] for b in plan.system_binds]
    rules.append(["read", plan.visible(plan.prefix)])
    rules += [["read", plan.visible(b.source)] for b in plan.site_binds]
    rules += [["list", str(plan.site_view)], ["read", "/proc"]]
    rules += [["device", f"/dev/{n}"] for n in ("null", "zero", "full", "random", "urandom")]
    rules += [["full", paths[d]] for d in ("work", "home", "tmp")]
    return rules


@pytest.mark.parametrize(("plan", "sb"), CASES)
@pytest.mark.parametrize("seccomp", [True, False])
def test_plain_tier_renders_the_bubblewrap_view_as_landlock_rules(plan: Plan, sb: SandboxSettings,
                                                                  seccomp: bool) -> None:
    """The plain tier mounts and unshares nothing; its policy is the bubblewrap tier's view of the
    host (the same Plan data), rendered into the rules its case is held to."""
    plan.site_view = "/tmp/stage-view"
    plain = get_tier("plain")
    policy = plain.policy(plan, sb, seccomp)
    assert policy.namespaces == frozenset() and policy.uid is None and not policy.caps
    paths = {"work": "/c/work", "home": "/c/home", "tmp": "/c/tmp"}
    config = plain.landlock(plan, sb, seccomp, paths)["landlock"]
    assert config["rules"] == old_plain_landlock_rules(plan, paths)
    assert config["require"] == (plan.landlock_abi > 0)
    # no rule reaches beyond a package's own entry: never a whole site-packages directory
    readable = {path for access, path in config["rules"] if access in ("read", "full")}
    assert not readable & {plan.visible(d) for d in plan.site_dirs}
    # what bubblewrap binds read-only is read-only here too
    bwrap = get_tier("bubblewrap").policy(plan, sb, seccomp)
    bound = {m.source for m in bwrap.all_mounts() if m.kind == "bind" and m.read_only and m.source != "/dev/null"}
    assert bound <= {path for access, path in config["rules"] if access == "read"}


# ---------------------------------------------------------------- properties of the renderers


def _toy_policy() -> Policy:
    return Policy(
        mounts=(
            Mount("bind", "/a", source="/host/a"),
            Mount("bind", "/b", source="/host/b", read_only=False),
            Mount("proc", "/proc"),
            Mount("dev", "/dev", inside=(Mount("tmpfs", "/dev/shm", read_only=False, size=7, mode="1777"),)),
            Mount("tmpfs", "/tmp", read_only=False, size=9, mode="1777"),
            Mount("dir", "/tmp/x"),
        ),
        namespaces=frozenset({"pid", "net"}),
        seccomp=True,
        uid=None,
        caps=("CAP_CHOWN",),
        cwd="/tmp/x",
    )


def test_every_mount_appears_in_the_command_line_read_only_where_declared() -> None:
    policy = _toy_policy()
    argv = bwrap_args(policy, "bwrap")
    pairs = list(zip(argv, argv[1:], argv[2:], strict=False))
    for m in policy.all_mounts():
        if m.kind == "bind":
            assert (("--ro-bind" if m.read_only else "--bind"), m.source, m.target) in pairs
        elif m.kind in ("proc", "dev", "tmpfs", "dir"):
            flag = {"proc": "--proc", "dev": "--dev", "tmpfs": "--tmpfs", "dir": "--dir"}[m.kind]
            at = argv.index(m.target, argv.index(flag))
            assert argv[at - 1] == flag
            if m.kind != "dir":  # made read-only exactly when declared so
                remounted = any(argv[i : i + 2] == ["--remount-ro", m.target] for i in range(len(argv)))
                assert remounted is m.read_only
    # A mount inside another is made before the outer one turns read-only.
    assert argv.index("/dev/shm") < max(i for i, a in enumerate(argv) if a == "/dev" and argv[i - 1] == "--remount-ro")
    # Only the namespaces named; a user namespace only when named.
    assert "--unshare-pid" in argv and "--unshare-net" in argv
    assert not {"--unshare-ipc", "--unshare-uts", "--unshare-user", "--unshare-cgroup-try"} & set(argv)
    assert argv[-3:] == ["--remount-ro", "/", "--"] and argv[argv.index("--chdir") + 1] == "/tmp/x"


def test_every_mount_appears_in_the_oci_spec_read_only_where_declared() -> None:
    policy = _toy_policy()
    spec = oci_spec(policy, rootfs="/r", args=["x"], env={})
    by_target = {m["destination"]: m for m in spec["mounts"]}
    for m in policy.all_mounts():
        if m.kind in ("bind", "tmpfs", "proc"):
            got = by_target[m.target]
            assert ("ro" in got["options"]) is (m.read_only and m.kind != "tmpfs")
            if m.kind == "tmpfs":
                assert f"size={m.size}" in got["options"]
    assert [n["type"] for n in spec["linux"]["namespaces"]] == ["pid", "network"]
    assert spec["process"]["capabilities"]["bounding"] == ["CAP_CHOWN"]
    assert spec["process"]["noNewPrivileges"] is True and spec["root"]["readonly"] is True
