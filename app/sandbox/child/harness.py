"""The program every sandbox child runs: child/seccomp.py, child/values.py, child/runner.py and
this file (the reporter and ``main``), concatenated and sent as ``python -I -S -c`` source, so
none of the service's own files has to be visible in the sandbox. Stdlib only.

Two processes, so that the candidate never holds the result channel:

* the *reporter* is the process the parent started. Before anything is imported it forks the
  *runner*, ignores every signal it can, marks itself non-dumpable (a same-uid process can then
  neither ptrace it nor open ``/proc/<pid>/fd`` or ``/proc/<pid>/mem``), and keeps the result
  fd, which the runner closes at once. It relays the runner's framed messages after checking
  them, waits for the runner to exit, reports the exit status and CPU time, and kills whatever
  the case left behind.
* the *runner* imports numpy/JAX (the warm part), reports ``ready``, blocks on stdin for one
  case, applies the limits, the seccomp filter and the Python guards, reports ``armed``, waits
  until the reporter has passed that on, runs the candidate and frames the value it returned
  over a pipe to the reporter.

The candidate shares the runner's process, so it can write anything to that pipe; what it can
write there is exactly what it could return, and the reporter accepts one result after
``armed`` and nothing else, checks it as plain data within the caps (child/values.py) and passes
it on as compact ASCII JSON of bounded size. The parent alone holds the expected values, checks
the data again and compares.

The reporter forks *before* JAX starts its threads, which is why the candidate runs in the warm
process rather than in a fork of it: forking a process that has started XLA's thread pools is
unsafe."""
# ruff: noqa: F821 - runner(), _FRAME_HEADER and plain_problem come from earlier parts of the program

import contextlib
import json
import os
import select
import signal
import sys


class _Frames:
    """Accepts ``ready``, ``armed`` and then exactly one result, in that order. The result is
    checked as plain data (child/values.plain_problem) and re-encoded compactly: what reaches the
    parent is canonical ASCII JSON of at most ``max_bytes`` bytes, whatever the runner wrote."""

    ORDER = ("ready", "armed", "result")
    RESULT_KINDS = ("value", "raised", "oversize")

    def __init__(self, out_fd, max_bytes, max_items, ack_fd):
        self.out_fd, self.max_bytes, self.max_items, self.ack_fd = out_fd, max_bytes, max_items, ack_fd
        self.chunks, self.have = [], 0
        self.stage = 0
        self.result = None
        self.error = None

    def feed(self, data):
        """Linear in what arrives: chunks are joined only once a whole frame is present."""
        if self.error:
            return
        self.chunks.append(data)
        self.have += len(data)
        while self.error is None and self.have >= _FRAME_HEADER:
            head = self.chunks[0] if len(self.chunks[0]) >= _FRAME_HEADER else b"".join(self.chunks)
            n = int.from_bytes(head[:_FRAME_HEADER], "big")
            if n > self.max_bytes:
                self._fail("result larger than the limit")
                return
            if self.have < _FRAME_HEADER + n:
                return
            buf = b"".join(self.chunks)
            body, rest = buf[_FRAME_HEADER:_FRAME_HEADER + n], buf[_FRAME_HEADER + n:]
            self.chunks, self.have = ([rest] if rest else []), len(rest)
            self._accept(body)

    def _fail(self, why):
        self.error, self.chunks, self.have = why, [], 0

    def _accept(self, body):
        try:
            msg = json.loads(body)
        except (ValueError, RecursionError):
            self._fail("unreadable result frame")
            return
        if not isinstance(msg, dict) or self.stage >= len(self.ORDER):
            self._fail("more than one result")
            return
        expected, kind = self.ORDER[self.stage], msg.get("kind")
        if expected in ("ready", "armed"):
            if kind != expected:
                self._fail(f"expected {expected}, got another frame")
                return
            emit(self.out_fd, msg)
            if kind == "armed":
                os.write(self.ack_fd, b"k")
                os.close(self.ack_fd)
        elif kind in self.RESULT_KINDS:
            self.result = self._clean_result(msg)
        else:
            self._fail("unknown result kind")
            return
        self.stage += 1

    def _clean_result(self, msg):
        kind = msg["kind"]
        if kind == "raised":
            name = msg.get("type")
            return {"kind": "raised", "type": name if isinstance(name, str) and len(name) <= 40 else None}
        if kind == "oversize":
            return {"kind": "oversize"}
        value = msg.get("value")
        if plain_problem(value, self.max_items) is not None:
            return {"kind": "invalid"}
        if len(json.dumps(value, separators=(",", ":"), allow_nan=False)) > self.max_bytes:
            return {"kind": "oversize"}  # 2-byte characters grow when escaped to ASCII
        return {"kind": "value", "value": value}


def emit(fd, message):
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


_WAKEUP = [-1]


def _child_exit_wakeup():
    """Where there are no pidfds (gVisor's kernel of Debian's release): an fd that turns readable
    when a child exits (SIGCHLD through the interpreter's wake-up fd), instead of polling. Only
    there is SIGCHLD handled: the reporter runs under a uid of its own, which no signal of the
    case's reaches (see _become)."""
    try:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
    except (OSError, ValueError):
        return None
    _WAKEUP[0] = wake_r
    return wake_r


def reporter(cfg, pid, pipe_r, ack_w):
    out = cfg["result_fd"]
    os.close(0)
    frames = _Frames(out, int(cfg["max_result_bytes"]), int(cfg["max_result_items"]), ack_w)
    try:
        waiter = os.pidfd_open(pid)
    except (AttributeError, OSError):
        waiter = _child_exit_wakeup()
    status = None
    pipe_open = True
    while status is None:
        fds = [pipe_r] if pipe_open else []
        if waiter is not None:
            fds.append(waiter)
        ready, _, _ = select.select(fds, [], [], 0.05 if waiter is None else None)
        if waiter in ready and waiter == _WAKEUP[0]:
            with contextlib.suppress(OSError):
                os.read(waiter, 512)
        if pipe_r in ready:
            data = os.read(pipe_r, 1 << 16)
            if data:
                frames.feed(data)
            else:
                pipe_open = False
        got, raw, usage = os.wait4(pid, os.WNOHANG)
        if got == pid:
            status = (raw, usage)
    os.set_blocking(pipe_r, False)
    while pipe_open:  # what the runner wrote just before it exited
        try:
            data = os.read(pipe_r, 1 << 16)
        except BlockingIOError:
            break
        if not data:
            break
        frames.feed(data)
    raw, usage = status
    if cfg["reap_all"]:
        # The uid belongs to this sandbox alone: kill(-1) reaches every process the case left
        # behind (the kernel does it under the task-list lock, so a fork bomb cannot outrun it).
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    emit(out, {
        "kind": "final",
        "result": frames.result,
        "protocol_error": frames.error,
        "stage": frames.stage,
        "exit_code": os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else None,
        "signal": os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else None,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "max_rss_kb": usage.ru_maxrss,
    })
    os._exit(0)


def open_result_socket_first():
    """Where no fd can be handed in (the gvisor tier), the result channel is a unix socket the
    parent listens on: connected here, before the seccomp filter (which denies socket()) is
    installed, and placed on the fd number the configuration names."""
    cfg = json.loads(sys.argv[1])
    path = cfg.get("result_socket")
    if not path:
        return
    import socket  # only here: the other tiers' children never load it

    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
    except OSError as exc:
        os.write(2, f"harness set-up failed: {exc!r}\n".encode())
        os._exit(70)
    if sock.fileno() == cfg["result_fd"]:
        sock.detach()  # already where it belongs
    else:
        os.dup2(sock.fileno(), cfg["result_fd"])
        sock.close()


def _become(uid):
    """Drop to uid (no groups, no capabilities left). The gvisor tier starts the harness as the
    sandbox kernel's root: its user-space kernel lets a process signal its namespace's init, so
    the reporter (pid 1 there) and the runner must not share a uid."""
    if uid is None:
        return
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # From root to another uid every capability goes (a fork of the gvisor fork server held
    # SYS_ADMIN until here): checked, not assumed.
    with open("/proc/self/status") as f:
        if any(line.startswith("CapEff:") and int(line.split()[1], 16) for line in f):
            os.write(2, b"harness set-up failed: capabilities survived the uid change\n")
            os._exit(70)


def _ignore_catchable_signals():
    """The reporter has no use for any signal, so it ignores every one it can: a signal from the
    case (same uid in the plain and bubblewrap tiers) then does nothing to it. As the sandbox's
    pid 1 (bubblewrap) the kernel already drops what the namespace sends it with no handler,
    SIGKILL and SIGSTOP included; but the interpreter installs a handler for SIGINT
    (KeyboardInterrupt), and a handled signal reaches even init. SIGCHLD keeps its default:
    ignoring it would make the kernel reap the runner before the reporter reads its status.
    Only the runner, forked before this, keeps the interpreter's defaults."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        with contextlib.suppress(OSError, ValueError):  # the C library's own real-time signals
            signal.signal(sig, signal.SIG_IGN)


def main():
    cfg = json.loads(sys.argv[1])
    pipe_r, pipe_w = os.pipe()
    ack_r, ack_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _become(cfg.get("runner_uid"))
        os.close(cfg["result_fd"])
        os.close(pipe_r)
        os.close(ack_w)
        runner(cfg, pipe_w, ack_r)
    _become(cfg.get("reporter_uid"))
    _ignore_catchable_signals()
    os.close(pipe_w)
    os.close(ack_r)
    import ctypes  # after the fork: the runner child must start with nothing imported (see above)

    # Not dumpable: the runner (same uid) can no longer ptrace this process or open its fds.
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        os.kill(pid, signal.SIGKILL)
        os._exit(72)
    reporter(cfg, pid, pipe_r, ack_w)
