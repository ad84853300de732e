"""A small pool of grading processes: the API process's heavy pure work (grading a large inline
item or a chunk of a batch, parsing and validating a large body) runs in them, so the event loop's
interpreter never shares its lock with grading (app/grading/offload.py hands them out in turn).

- **Start method: forkserver.** The API process runs threads (the loop's helpers, the embedded
  job threads); forking it would copy locks held by threads that do not exist in the child. A
  fork server is a fresh interpreter that imports the grading modules once (its preload) and
  forks each child from that single-threaded state, so replacing a child costs a fork, not an
  interpreter start.
- **What a child holds.** The parent's Settings object, sent at start (the child reads no
  environment of its own), and the extensions named in ``SCALING_GRADER_EXTENSIONS`` when the pool
  started, loaded before the child takes work (app/extensions.py), so it grades every kind the
  parent does. Calls are ``fn(*args)`` with a module-level ``fn``; results come back pickled.
  Nothing is counted in a child: the caller records a grade in the API process (metrics live there).
- **The loop wins the CPU.** Children run at ``NICENESS`` (the kernel gives the loop's process the
  core first when both want it), under an address-space limit (``ADDRESS_SPACE_BYTES``: a memory
  bomb is a MemoryError in the child, not a swapping host) and first in line for the OOM killer.
- **They die with the parent.** Each child holds the read end of a lifeline pipe whose only
  writer is the API process, and a thread that waits on it ends the child at its end: the API
  process died, however (a child busy with an item is not reading its work pipe, and the fork
  server, which children keep alive, is their parent, not the API process). Idle, a child also
  exits at the end of its work pipe. Children are children of the fork server, which reaps them;
  ``close`` kills and joins every child, so none outlives the app.
- **A crash is a fault, not an error page.** A child that dies mid-call (a segfault, SIGKILL, the
  OOM killer) makes that call raise ``GradingProcessDied``, which the callers turn into an unscored
  fault for the item (or a 503 for a body); the dead child is reaped and replaced before its slot
  is used again, so the next call is served as usual."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from app.cpus import run_delay
from app.extensions import extension_names, load_extensions
from app.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

NICENESS = 10
# Far above what parsing the largest body allowed or grading a chunk needs; a child past it gets
# a MemoryError (an unscored fault of that item) instead of pushing the host into swap.
ADDRESS_SPACE_BYTES = 4 * 1024**3
# Counted in time the child could have run: time it waits for a CPU does not count (a start at
# the lowest priority beside a busy host took minutes of wall time and had not failed; with a
# wall-clock bound the app failed to start there, exit 3). START_WALL_LIMIT bounds a child that
# spins while starved: its wait would otherwise last START_TIMEOUT_SECONDS / its CPU share.
START_TIMEOUT_SECONDS = 60.0
START_WALL_LIMIT = 600.0
_PR_SET_PDEATHSIG = 1

_settings: Settings | None = None  # a child's copy of the parent's settings


class GradingProcessDied(Exception):
    """The grading process running a call died before it answered (killed, crashed, out of memory)."""


class GradingProcessFailed(Exception):
    """The call raised in the grading process (its type name only: no traceback crosses over)."""


def child_settings() -> Settings:
    """In a grading process: the settings its parent started it with."""
    if _settings is None:
        raise RuntimeError("not in a grading process")
    return _settings


def _die_with_parent(lifeline: Connection) -> None:
    """End this process when the API process ends: it alone holds the lifeline's write end."""

    def watch() -> None:
        with contextlib.suppress(Exception):
            lifeline.poll(None)  # returns at EOF: nothing is ever written
        os._exit(0)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    if sys.platform.startswith("linux"):  # and when the fork server dies, whoever killed it
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _child_main(conn: Connection, lifeline: Connection, settings: Settings, extensions: str) -> None:
    global _settings
    _die_with_parent(lifeline)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the group is the parent's to act on
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adj:
        adj.write("1000")
    load_extensions(extensions)
    _settings = settings
    conn.send(("ready", os.getpid()))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:  # said by type only; the parent turns it into a fault
            log.exception("grading call %s failed", getattr(fn, "__qualname__", fn))
            reply = (False, type(exc).__name__)
        try:
            conn.send(reply)
        except Exception as exc:  # an answer that does not pickle
            conn.send((False, type(exc).__name__))


def ready_in_time(conn: Connection, pid: int | None, timeout: float, wall_limit: float) -> bool:
    """Whether ``conn`` has something to read before process ``pid`` has had ``timeout`` seconds
    in which it could run (time it waited for a CPU is not counted), or ``wall_limit`` seconds
    of wall time pass."""
    def waited() -> float:
        return run_delay(pid) if pid else 0.0

    started, waited_before = time.monotonic(), waited()
    while True:
        elapsed = time.monotonic() - started
        ran = elapsed - max(0.0, waited() - waited_before)
        if ran >= timeout or elapsed >= wall_limit:
            return conn.poll(0)
        if conn.poll(min(1.0, timeout - ran, wall_limit - elapsed)):
            return True


class _Child:
    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process, self.conn = process, conn


class GradingProcesses:
    """``size`` grading processes, started on first use (or by ``start``), each running one call
    at a time. ``call`` blocks: run it on a thread (app/grading/offload.py does)."""

    def __init__(self, settings: Settings, size: int, preload: Sequence[str] = ()) -> None:
        self.settings, self.size = settings, size
        self._preload = ["app.grading.processes", *preload]
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._children: set[_Child] = set()
        self._lock = threading.Lock()
        self._started = self._closed = False
        self._extensions = ""

    def start(self) -> None:
        with self._lock:
            if self._started or self._closed:
                return
            self._extensions = ",".join(extension_names())
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(self._preload)
            self._context = context
            self._lifeline, self._lifeline_end = context.Pipe(duplex=False)  # (read, write)
            for _ in range(self.size):
                self._idle.put(self._spawn())
            self._started = True

    def _spawn(self) -> _Child:
        ours, theirs = self._context.Pipe(duplex=True)
        # daemon: multiprocessing also kills it if the interpreter exits without ``close``
        process = self._context.Process(
            target=_child_main,
            name="grading",
            args=(theirs, self._lifeline, self.settings, self._extensions),
            daemon=True,
        )
        process.start()
        theirs.close()  # the child's end lives in the child alone: its death is our EOF
        child = _Child(process, ours)
        try:
            if not ready_in_time(ours, child.process.pid, START_TIMEOUT_SECONDS, START_WALL_LIMIT):
                raise GradingProcessDied("a grading process did not start in time")
            ours.recv()
        except (EOFError, OSError, GradingProcessDied):
            self._reap(child)
            raise GradingProcessDied("a grading process could not start") from None
        self._children.add(child)
        return child

    def _reap(self, child: _Child) -> None:
        self._children.discard(child)
        with contextlib.suppress(OSError):
            child.conn.close()
        with contextlib.suppress(OSError, ValueError):
            child.process.kill()
        child.process.join(10)

    def call(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` in a grading process. GradingProcessDied if that process dies first (it
        is replaced); GradingProcessFailed if the call raised there."""
        if not self._started:
            self.start()
        if self._closed:
            raise GradingProcessDied("the grading processes are stopped")
        child = self._idle.get()
        if child.process.exitcode is not None:
            # it died idle (the OOM killer takes these first, busy or not): nothing of this call
            # was sent, so the call goes to its replacement rather than failing as a fault
            child = self._replace(child)
        try:
            child.conn.send((fn, args))
            ok, value = child.conn.recv()
        except (EOFError, OSError) as exc:
            child = self._replace(child)
            raise GradingProcessDied("the grading process stopped during this call") from exc
        except Exception as exc:  # arguments that do not pickle: refused before anything is sent
            raise GradingProcessFailed(type(exc).__name__) from None
        finally:
            self._idle.put(child)
        if not ok:
            raise GradingProcessFailed(value)
        return value  # type: ignore[no-any-return]

    def _replace(self, dead: _Child) -> _Child:
        self._reap(dead)
        with self._lock:
            if self._closed:
                return dead
            try:
                return self._spawn()
            except GradingProcessDied:
                log.exception("a grading process could not be replaced")
                return dead  # the next call on this slot tries again

    def pids(self) -> list[int]:
        return [c.process.pid for c in list(self._children) if c.process.pid is not None]

    def close(self) -> None:
        """Kill and reap every child, busy ones included (their calls get GradingProcessDied)."""
        with self._lock:
            self._closed = True
            children = list(self._children)
        for child in children:
            with contextlib.suppress(OSError, ValueError):
                child.process.kill()
        for child in children:
            child.process.join(10)
            if child.process.exitcode is not None:
                self._children.discard(child)
