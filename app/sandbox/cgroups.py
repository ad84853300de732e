"""Limits for a case as a whole: one control group per sandbox child, holding every process the
case starts (the reporter and bubblewrap's launcher included), so that memory (tmpfs pages and
kernel memory such as inodes count too), the number of tasks and the CPU time are bounded for
the case rather than per process, where forks would multiply them. Memory and tasks are kernel
limits; CPU time is accounted by the group and enforced by the parent (executor.py), which ends
the case when all its processes together have used more than the case's CPU allowance.

Used when the service is root and the host has a writable cgroup v2 tree with the memory and
pids controllers delegated, or writable cgroup v1 memory, pids and cpuacct hierarchies. Otherwise
``CgroupHost.detect()`` returns None and the per-process rlimits are what holds.

Each service process keeps its case groups under one parent group named after its pid and start
time, inside the group it runs in itself (so the host's own limits on the service still apply),
and removes parents whose process is dead at start.

With ``idle_cpu`` every case runs in one CPU group of the service's marked idle (``cpu.idle``,
Linux 5.15): its cases then take only the CPU that nothing else beside them wants, and any other
task that wakes (the API grading inline, the worker's own heartbeat) preempts them at once. On
v2 that group is the parent itself; on v1 a directory of the same name in the cpu hierarchy,
which every case joins (the cases of a service share it, as they share the service's CPU weight
without it)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.cpus import own_cgroups
from app.sandbox.owners import current_owner, owner_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_PREFIX = "scaling-grader-cases-"
# Only groups named exactly like ours are ever removed as stale: other software on the host may
# use similar names.
_PARENT_NAME = re.compile(r"scaling-grader-cases-(\d+)-(\d+)-(\d+)")
# cpuacct, not cpu: a group under the cpu controller is one scheduling entity, so every case
# of this service together would weigh as much as one process of anyone else on the host.
_V1_CONTROLLERS = ("memory", "pids", "cpuacct")
log = logging.getLogger(__name__)
_UNLIMITED = "max"
_hosts = itertools.count()


def _write(path: Path, value: str | int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _read_int(path: Path) -> int:
    text = path.read_text().strip()
    return 1 << 62 if text == _UNLIMITED else int(text)


@dataclass
class CaseCgroup:
    """The group(s) of one child: one directory for v2, one per controller for v1."""

    version: int
    dirs: dict[str, Path]  # controller ("" for v2) -> directory
    cpu_at_arm: float = 0.0
    # A group the case joins beside its own, shared with the service's other cases: the idle CPU
    # group on cgroup v1 (never emptied or removed with the case).
    shared_dirs: tuple[Path, ...] = ()

    @property
    def procs_files(self) -> list[str]:
        """Where the launcher writes its own pid before anything of the case starts."""
        return [str(d / "cgroup.procs") for d in (*self.dirs.values(), *self.shared_dirs)]

    def _file(self, controller: str, v1_name: str, v2_name: str) -> Path:
        return self.dirs[""] / v2_name if self.version == 2 else self.dirs[controller] / v1_name

    def memory_usage(self) -> int:
        return _read_int(self._file("memory", "memory.usage_in_bytes", "memory.current"))

    def task_count(self) -> int:
        return _read_int(self._file("pids", "pids.current", "pids.current"))

    def set_memory_limit(self, limit: int) -> None:
        if self.version == 2:
            _write(self.dirs[""] / "memory.max", limit)
            with contextlib.suppress(OSError):  # no swap for the case either
                _write(self.dirs[""] / "memory.swap.max", 0)
            return
        memory = self.dirs["memory"] / "memory.limit_in_bytes"
        memsw = self.dirs["memory"] / "memory.memsw.limit_in_bytes"  # only with swap accounting
        # v1 refuses a memory limit above the memory+swap one (EINVAL), and a memory+swap limit
        # below the memory one: raising, the memory+swap limit goes first; lowering, last.
        with contextlib.suppress(OSError, ValueError):
            if limit > int(memory.read_text()):
                _write(memsw, limit)
        _write(memory, limit)
        with contextlib.suppress(OSError):
            _write(memsw, limit)

    def set_task_limit(self, limit: int) -> None:
        _write(self._file("pids", "pids.max", "pids.max"), limit)

    def cpu_seconds(self) -> float:
        """CPU time used by every process of the group so far (accounting: the case's own group
        changes no scheduling weight; only the service's idle group, when asked for, does)."""
        if self.version == 2:
            for line in (self.dirs[""] / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return 0.0
        return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9

    def arm(self, memory_bytes: int, max_tasks: int) -> dict[str, int]:
        """Limits for the case from now on: what the warm child already holds plus the case's
        allowance (as the rlimits count from the warm state too). The CPU time used so far is
        noted so that the case's own can be told apart (``cpu_seconds() - cpu_at_arm``)."""
        memory = self.memory_usage() + memory_bytes
        tasks = self.task_count() + max_tasks
        self.set_memory_limit(memory)
        self.set_task_limit(tasks)
        self.cpu_at_arm = self.cpu_seconds()
        return {"memory_bytes": memory, "tasks": tasks}

    def oom_kills(self) -> int:
        """How many processes of the case the kernel killed for memory."""
        return _event_count(self._file("memory", "memory.oom_control", "memory.events"), "oom_kill")

    def failcnt(self) -> int:
        """v1: times the memory limit was hit (a write to tmpfs refused counts too)."""
        if self.version == 2:
            return _event_count(self.dirs[""] / "memory.events", "max")
        with contextlib.suppress(OSError, ValueError):
            return int((self.dirs["memory"] / "memory.failcnt").read_text())
        return 0

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                seen.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(seen)

    def remove(self) -> bool:
        """Kill whatever is left in the group and remove it; True when it is gone."""
        return _kill_and_remove(list(self.dirs.values()))

    def empty(self) -> bool:
        """Kill whatever is left in the group and wait until no task of it remains; True then.
        The directories stay: ``remove_later`` takes them away off the case's critical path."""
        dirs = list(self.dirs.values())
        for _ in range(200):
            if not any(_kill_tasks(d) for d in dirs):
                return True
            time.sleep(0.005)
        return False

    def remove_later(self) -> None:
        """Remove the (emptied) group on the remover thread. On cgroup v1 every rmdir waits for
        the kernel (about 3 ms per controller on a quiet host, measured): done inline it was most
        of a warm case's latency. Nothing of the case is left by then (``empty``), so the
        directories are only bookkeeping; a group still here at stop is removed by ``close``."""
        _remover.submit(list(self.dirs.values()))


def _kill_tasks(d: Path) -> bool:
    """SIGKILL every task in one group directory; True if any was there."""
    kill_file = d / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            _write(kill_file, 1)
    try:
        pids = (d / "cgroup.procs").read_text().split()
    except (OSError, ValueError):
        return False  # gone already
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    return bool(pids)


def release_charges(d: Path) -> None:
    """Uncharge the memory a group still holds once its tasks are gone (page cache of the files
    its case read, the tmpfs pages of its files), so that its removal frees it at once. A group
    removed with charges left lives on in the kernel as a dying group until every page charged
    to it is reclaimed, which for the page cache of read-only system files may be never: one
    per case, thousands an hour, until the host refuses to create cgroups. cgroup v1:
    ``memory.force_empty``; v2: ``memory.reclaim`` of everything the group holds (both reclaim
    the group's pages, clean page cache first). Best effort: a failure leaves the group
    only as dying as it was before."""
    force_empty, reclaim = d / "memory.force_empty", d / "memory.reclaim"
    with contextlib.suppress(OSError, ValueError):
        if force_empty.exists():
            _write(force_empty, 0)
        elif reclaim.exists():
            held = _read_int(d / "memory.current")
            if held > 0:
                _write(reclaim, held)


def _rmdir(d: Path) -> None:
    d.rmdir()  # one place, so that tests can see what a group still held when it went


def _kill_and_remove(dirs: list[Path]) -> bool:
    for _ in range(200):
        left = False
        for d in dirs:
            if not d.exists():
                continue
            if not _kill_tasks(d):  # charges are released only from a group without tasks
                release_charges(d)
            try:
                _rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:  # still busy: a dying task leaves the group a moment later
                left = True
        if not left:
            return True
        time.sleep(0.01)
    return False


class _Remover:
    """One daemon thread removing emptied case groups in the order they were handed over."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Path]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, dirs: list[Path]) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cgroup-remover", daemon=True)
                self._thread.start()
        self._queue.put(dirs)

    def _loop(self) -> None:
        while True:
            dirs = self._queue.get()
            # What cannot be removed is left for close() or the next start (remove_stale_parents).
            with contextlib.suppress(OSError):
                _kill_and_remove(dirs)
            with self._lock:
                self._pending -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every group handed over so far is removed (or tried); True if so."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


_remover = _Remover()


def drain_removals(timeout: float = 10.0) -> bool:
    """Block until the case groups handed to the remover are gone (at stop, and for tests)."""
    return _remover.drain(timeout)


class CgroupHost:
    """The writable cgroup tree this service process uses for its cases."""

    def __init__(self, version: int, parents: dict[str, Path]) -> None:
        self.version = version
        self.parents = parents  # controller ("" for v2) -> this process's parent group
        self._counter = itertools.count()
        # The group marked cpu.idle that holds every case (v2: the parent; v1: its namesake in
        # the cpu hierarchy, joined by each case), or None: cases share the service's CPU weight.
        self.idle_group: Path | None = None
        self._shared_dirs: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return f"cgroup v{self.version}" + (", idle CPU" if self.idle_group is not None else "")

    @classmethod
    def detect(cls, root: Path = CGROUP_ROOT, idle_cpu: bool = False) -> CgroupHost | None:
        """The host's cgroups, if this process may create groups with the controllers a case
        needs; None otherwise (the caller then relies on rlimits). With ``idle_cpu``, cases also
        run in an idle CPU group where the host allows one (``idle_group``; otherwise None and a
        warning: the cases still run, at the service's own weight)."""
        if os.geteuid() != 0:
            return None
        own = own_cgroups()
        if not own:
            return None
        # Unique within the process too: a throwaway host (stale clean-up) never shares a
        # parent with the one the sandboxes use.
        name = PARENT_PREFIX + current_owner().replace(" ", "-") + f"-{next(_hosts)}"
        candidates: list[tuple[int, dict[str, Path]]] = []
        v2 = root / "cgroup.controllers"
        if v2.exists() and {"memory", "pids"} <= set(v2.read_text().split()) and "" in own:
            candidates.append((2, {"": root / own[""].lstrip("/")}))
        if all((root / c / "cgroup.procs").exists() and c in own for c in _V1_CONTROLLERS):
            candidates.append((1, {c: root / c / own[c].lstrip("/") for c in _V1_CONTROLLERS}))
        for version, bases in candidates:
            host = cls._try(version, bases, name)
            if host is not None:
                cpu_base = _v1_cpu_base(root, own) if version == 1 else None
                if cpu_base is not None:
                    # Idle groups of services that were killed, whether or not this start wants
                    # one (the start-up clean-up and a restart with the setting off detect without).
                    remove_stale_parents({"cpu": cpu_base})
                if idle_cpu:
                    host._make_idle(cpu_base)
                return host
        return None

    def _make_idle(self, cpu_base: Path | None) -> None:
        if self.version == 2:
            group = self.parents[""]
            if not (group / "cpu.idle").exists():
                # The cpu controller for the parent, from the group this service runs in (refused
                # where that group may not hand it down: then there is no idle group).
                with contextlib.suppress(OSError):
                    _write(group.parent / "cgroup.subtree_control", "+cpu")
            shared: tuple[Path, ...] = ()
        else:
            if cpu_base is None:
                log.warning("idle CPU for cases asked for, but there is no cgroup v1 cpu hierarchy")
                return
            group = cpu_base / self.parents["cpuacct"].name
            # cpu and cpuacct mounted together: the parent is that group already, and each case's
            # own group below it is idle with it.
            together = group.exists() and os.path.samefile(group, self.parents["cpuacct"])
            shared = () if together else (group,)
        try:
            if shared:
                group.mkdir(exist_ok=True)
            _write(group / "cpu.idle", 1)
        except OSError as exc:
            log.warning("idle CPU for cases asked for, but %s cannot be marked idle: %s", group, exc)
            if shared:
                _kill_and_remove(list(shared))
            return
        self.idle_group = group
        self._shared_dirs = shared

    @classmethod
    def _try(cls, version: int, bases: dict[str, Path], name: str) -> CgroupHost | None:
        parents = {c: base / name for c, base in bases.items()}
        try:
            for parent in parents.values():
                parent.mkdir(exist_ok=True)
            if version == 2:  # (CPU time is in cpu.stat without enabling the cpu controller)
                _write(parents[""] / "cgroup.subtree_control", "+memory +pids")
            host = cls(version, parents)
            probe = host.create()  # a group the case needs must really work
            probe.set_memory_limit(1 << 30)
            probe.set_task_limit(64)
            probe.cpu_seconds()
            probe.remove()
        except OSError:
            _kill_and_remove(list(parents.values()))
            return None
        remove_stale_parents(bases)
        return host

    def create(self) -> CaseCgroup:
        n = next(self._counter)
        dirs = {c: parent / f"case-{n}" for c, parent in self.parents.items()}
        try:
            for d in dirs.values():
                d.mkdir()
        except OSError:
            _kill_and_remove(list(dirs.values()))
            raise
        return CaseCgroup(self.version, dirs, shared_dirs=self._shared_dirs)

    def close(self) -> None:
        """Remove every case group and the parent (at stop)."""
        drain_removals()
        for parent in self.parents.values():
            with contextlib.suppress(OSError):
                _kill_and_remove([d for d in parent.iterdir() if d.is_dir()])
        _kill_and_remove([*self.parents.values(), *self._shared_dirs])


def _v1_cpu_base(root: Path, own: dict[str, str]) -> Path | None:
    """The group this process runs in in the cgroup v1 cpu hierarchy (where idle groups go)."""
    if "cpu" not in own or not (root / "cpu" / "cgroup.procs").exists():
        return None
    return root / "cpu" / own["cpu"].lstrip("/")


def remove_stale_parents(bases: dict[str, Path]) -> list[str]:
    """Parent groups of service processes that are dead (killed without a chance to clean)."""
    removed = []
    for base in bases.values():
        with contextlib.suppress(OSError):
            for parent in base.iterdir():
                match = _PARENT_NAME.fullmatch(parent.name)
                if match is None or not parent.is_dir():
                    continue
                if owner_alive(f"{match[1]} {match[2]}") is not False:
                    continue
                cases = [d for d in parent.iterdir() if d.is_dir()]
                if _kill_and_remove([*cases, parent]):
                    removed.append(str(parent))
    return removed


_shared: list[CgroupHost | None] = []
_shared_lock = threading.Lock()


def shared_cgroup_host(idle_cpu: bool = False) -> CgroupHost | None:
    """The process's one host for case groups (detected once, by the first caller's
    ``idle_cpu``; None means rlimits only)."""
    with _shared_lock:
        if not _shared:
            _shared.append(CgroupHost.detect(idle_cpu=idle_cpu))
        return _shared[0]


def close_shared_cgroup_host() -> None:
    """At stop: remove every case group of this process and its parent group."""
    with _shared_lock:
        host = _shared.pop() if _shared else None
    if host is not None:
        host.close()


def _event_count(path: Path, wanted: str) -> int:
    """The count of one key in a cgroup file of ``key value`` lines (0 when absent or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == wanted:
                return int(value)
    return 0
