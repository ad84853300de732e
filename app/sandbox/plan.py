"""What a sandbox child needs from the host: the interpreter, its standard library, the
site-packages entries of the configured packages and their dependencies, system libraries.
Everything else on the host (the service's code, settings, secrets, other jobs) stays out of the
bubblewrap tier's view, and, where the kernel offers Landlock, out of the plain tier's reach (the
same data rendered as Landlock rules: tiers/plain.py).

When the service runs as root, children run under a dedicated unprivileged uid that may not be
allowed to reach the interpreter (pyenv under a 0700 /root, say). Such paths are *staged*: a
launcher in a private mount namespace bind-mounts them onto world-traversable empty directories
before dropping to the child's uid, so no permission on the host has to change."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.sandbox.child.landlock import kernel_abi
from app.sandbox.owners import STAGE_PREFIX, owned_tempdir

SITE_IN_SANDBOX = "/sandbox/site"


@dataclass(frozen=True)
class Bind:
    source: str  # path on the host
    target: str  # path inside the bubblewrap tier


@dataclass
class Plan:
    python: str  # interpreter path on the host
    prefix: str  # its installation prefix (stdlib, libpython)
    site_binds: list[Bind]  # site-packages entries, each bound under SITE_IN_SANDBOX
    site_dirs: list[str]  # host directories holding them
    system_binds: list[Bind]
    is_root: bool
    staging_dir: str | None = None
    staged: dict[str, str] = field(default_factory=dict)  # host source -> staged mountpoint
    tools: dict[str, str] = field(default_factory=dict)  # unshare, sh, setpriv, bwrap, runsc
    scratch_dirs: list[str] = field(default_factory=list)  # made for the tiers (gvisor's root)
    # The highest Landlock ABI the kernel offers (0: none, landlock_missing says why): the plain
    # tier confines each case's file access with it (tiers/plain.py, child/landlock.py).
    landlock_abi: int = 0
    landlock_missing: str | None = None
    # The plain tier's sys.path: a directory of links, one to each site-packages entry of
    # site_binds (as a dedicated uid reaches it), and nothing else; bubblewrap's SITE_IN_SANDBOX
    # for a child that has no mount namespace to bind them in.
    site_view: str | None = None

    def cleanup(self) -> None:
        """Remove the staging mount points (empty on the host; mounts live only in children)
        and the tiers' scratch directories."""
        for d in [self.staging_dir, *self.scratch_dirs]:
            if d:
                shutil.rmtree(d, ignore_errors=True)

    def visible(self, path: str) -> str:
        """The path a child under a dedicated uid uses for a host path (staged if need be)."""
        for source, point in self.staged.items():
            if path == source or path.startswith(source + "/"):
                return point + path[len(source) :]
        return path


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0]


def distribution_closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions for names and everything they require (extras excluded)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        todo.extend(_requirement_name(r) for r in dist.requires or [] if "extra ==" not in r)
    return list(seen.values())


def site_entries(names: tuple[str, ...]) -> list[Bind]:
    """Top-level files and directories (package dirs, vendored .libs, dist-info) to bind."""
    binds: dict[str, Bind] = {}
    for dist in distribution_closure(names):
        root = Path(str(dist.locate_file("")))
        for f in dist.files or []:
            top = str(f).split("/", 1)[0]
            if top in ("..", "") or top.endswith(".data") or top == "__pycache__":
                continue
            source = root / top
            if source.exists() and top not in binds:
                binds[top] = Bind(str(source), f"{SITE_IN_SANDBOX}/{top}")
    return sorted(binds.values(), key=lambda b: b.target)


def _system_binds() -> list[Bind]:
    binds = []
    for d in ("/usr/lib", "/usr/lib64", "/usr/lib32"):
        if os.path.isdir(d) and not os.path.islink(d):
            binds.append(Bind(d, d))
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime"):
        if os.path.exists(f):
            binds.append(Bind(f, f))
    return binds


def reachable_by_others(path: str) -> bool:
    """True when an unrelated uid can traverse to path and read it."""
    p = Path(path)
    for parent in [*reversed(p.parents), p]:
        try:
            mode = parent.stat().st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH and stat.S_ISDIR(mode):
            return False
    return bool(p.stat().st_mode & stat.S_IROTH)


def _stage(plan: Plan, sources: list[str]) -> None:
    # Marked with this process as owner: removed at stop, or at the next start if this process
    # was killed (owners.remove_stale_dirs).
    plan.staging_dir = owned_tempdir(STAGE_PREFIX, 0o755)
    for i, source in enumerate(sources):
        point = os.path.join(plan.staging_dir, f"s{i}")
        if os.path.isdir(source):
            os.mkdir(point, 0o755)
        else:
            Path(point).touch(0o644)
        plan.staged[source] = point


def build_plan(python: Path | None, packages: tuple[str, ...]) -> Plan:
    exe = os.path.realpath(python or sys.executable)
    prefix = sys.base_prefix if python is None else str(Path(exe).parent.parent)
    site_binds = site_entries(packages)
    site_dirs = sorted({str(Path(b.source).parent) for b in site_binds})
    plan = Plan(
        python=exe,
        prefix=prefix,
        site_binds=site_binds,
        site_dirs=site_dirs,
        system_binds=_system_binds(),
        is_root=os.geteuid() == 0,
    )
    plan.landlock_abi, plan.landlock_missing = kernel_abi()
    for tool in ("bwrap", "unshare", "setpriv", "sh", "mount", "runsc"):
        found = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if found:
            plan.tools[tool] = found
    if plan.is_root:
        hidden = [p for p in [prefix, *site_dirs] if not reachable_by_others(p)]
        if hidden:
            _stage(plan, hidden)
    _make_site_view(plan)
    return plan


def _make_site_view(plan: Plan) -> None:
    """plan.site_view: the configured packages' entries as links in a directory of their own, so
    that listing it (as Python's import system does) shows those and no other entry of
    site-packages, whose files a plain case may not open (tiers/plain.py)."""
    view = owned_tempdir(STAGE_PREFIX, 0o755)
    plan.scratch_dirs.append(view)
    for b in plan.site_binds:
        os.symlink(plan.visible(b.source), os.path.join(view, os.path.basename(b.target)))
    plan.site_view = view
