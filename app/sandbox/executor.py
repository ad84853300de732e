"""Run one case in one ready child: send the case, watch the result channel and the captured
output under the wall-clock limit, then destroy the child whatever happened."""

from __future__ import annotations

import json
import os
import selectors
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.sandbox.launch import Child, kill_child, read_messages, stderr_tail

if TYPE_CHECKING:
    from app.settings import SandboxSettings

_KEEP_OUTPUT = 4096  # bytes of each stream kept for the verdict's evidence
_CPU_POLL_SECONDS = 0.2  # how often a case's total CPU time is checked, where a group has it
_CASE_CPU_MARGIN = 1.25


@dataclass
class CaseRun:
    """What the parent observed. ``status``: finished (the reporter's final message arrived),
    timeout (wall clock), output_limit, crashed (the sandbox vanished after candidate code
    started) or sandbox_fault (nothing of the candidate ran, or the child died with the fork
    server that forked it: see Sandbox._run)."""

    status: str
    final: dict[str, Any] | None = None
    armed: dict[str, Any] | None = None
    stdout: str = ""
    stderr: str = ""
    output_bytes: int = 0
    wall_seconds: float = 0.0
    fault: str | None = None
    tier: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def case_request(
    source: str, entry: str, args: list[Any], kwargs: dict[str, Any], sb: SandboxSettings
) -> bytes:
    return json.dumps({
        "source": source,
        "entry": entry,
        "args": args,
        "kwargs": kwargs,
        "limits": {
            "cpu_seconds": sb.cpu_seconds,
            "address_space_bytes": sb.address_space_bytes,
            "max_processes": sb.max_processes,
            "max_open_files": sb.max_open_files,
            "max_file_bytes": sb.max_file_bytes,
        },
    }).encode()


def _send_request(child: Child, request: bytes) -> str | None:
    stdin = child.popen.stdin
    assert stdin is not None
    try:
        stdin.write(request)
        stdin.close()
    except (BrokenPipeError, OSError) as exc:
        return f"could not send the case: {exc.__class__.__name__}"
    return None


def _arm_case_limits(child: Child, sb: SandboxSettings) -> dict[str, int] | str:
    """The whole case's limits, set before it receives the case; an error text on failure."""
    assert child.cgroup is not None
    try:
        return child.cgroup.arm(sb.case_memory_bytes, sb.max_processes + child.extra_tasks)
    except OSError as exc:
        return f"could not set the case's control group limits: {exc.strerror or exc}"


def _case_cpu_exceeded(child: Child, sb: SandboxSettings, run: CaseRun) -> bool:
    """True once all the case's processes together have used more CPU than the case may (the
    per-process RLIMIT_CPU alone would let each fork use the whole allowance)."""
    assert child.cgroup is not None
    try:
        used = child.cgroup.cpu_seconds() - child.cgroup.cpu_at_arm
    except (OSError, ValueError):
        return False
    run.extra["case_cpu_seconds"] = round(used, 3)
    # The harness's own set-up after the case arrives (limits, filter, guards) is charged here
    # too; the margin keeps an honest case that just fits RLIMIT_CPU from ending early.
    return used > sb.cpu_seconds * _CASE_CPU_MARGIN + 0.5


def run_in_child(child: Child, request: bytes, sb: SandboxSettings) -> CaseRun:
    tier = child.tier + ("+seccomp" if child.seccomp else "")
    start = time.monotonic()
    case_limits: dict[str, int] | None = None
    if child.cgroup is not None:
        armed = _arm_case_limits(child, sb)
        if isinstance(armed, str):
            return CaseRun("sandbox_fault", fault=armed, tier=tier)
        case_limits = armed
    fault = _send_request(child, request)
    if fault:
        return CaseRun("sandbox_fault", fault=f"{fault}: {stderr_tail(child)}", tier=tier)
    deadline = start + sb.wall_seconds
    out = {"stdout": bytearray(), "stderr": bytearray()}
    total = 0
    run = CaseRun("timeout", tier=tier)
    sel = selectors.DefaultSelector()
    sel.register(child.result_fd, selectors.EVENT_READ, "result")
    sel.register(child.popen.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
    sel.register(child.popen.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]
    last_look = False
    try:
        while run.final is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if last_look:
                    run.status = "timeout"
                    break
                # One look without waiting first: a result the child sent in time counts. The
                # deadline is read on this process's clock, and a process stopped or starved past
                # it (not the child) would otherwise turn a finished case into a timeout.
                last_look, remaining = True, 0.0
            if case_limits is not None and _case_cpu_exceeded(child, sb, run):
                run.status = "timeout"
                break
            events = sel.select(remaining if case_limits is None else min(remaining, _CPU_POLL_SECONDS))
            for key, _ in events:
                if key.data == "result":
                    if not read_messages(child, 0):
                        sel.unregister(child.result_fd)
                        if child.oversize:  # a result line past the cap: stop reading, kill
                            run.status = "output_limit"
                        else:
                            run.status = "crashed" if run.armed else "sandbox_fault"
                        run.final = {}
                        break
                    for msg in child.lines:
                        if msg.get("kind") == "armed" and run.armed is None:
                            run.armed = msg
                        elif msg.get("kind") == "final":
                            run.final = msg
                            run.status = "finished"
                    child.lines.clear()
                    continue
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                total += len(data)
                buf = out[key.data]
                if len(buf) < _KEEP_OUTPUT:
                    buf += data[: _KEEP_OUTPUT - len(buf)]
                if total > sb.max_output_bytes:
                    run.status = "output_limit"
                    run.final = {}
                    break
    finally:
        sel.close()
    if run.final == {}:
        run.final = None
    if run.status == "sandbox_fault":
        run.fault = f"the child exited before running the candidate: {stderr_tail(child) or 'no message'}"
    elif run.status == "finished" and run.final and run.final.get("stage", 0) < 2:
        run.status = "sandbox_fault"
        run.fault = "the harness stopped before running the candidate"
    run.wall_seconds = time.monotonic() - start
    run.output_bytes = total
    if case_limits is not None:
        run.extra["case_limits"] = case_limits
    run.stdout = out["stdout"].decode(errors="replace")
    run.stderr = out["stderr"].decode(errors="replace")
    if run.status in ("timeout", "output_limit"):
        # Stop it now rather than in destroy(): the verdict should not wait on a busy child.
        kill_child(child)
    return run
