"""The program every sandbox child runs (stdlib only; sent as ``python -I -S -c`` source together
with child_seccomp.py, so none of the service's own files has to be visible in the sandbox).

Two processes, so that the candidate never holds the result channel:

* the *reporter* is the process the parent started. Before anything is imported it forks the
  *runner*, marks itself non-dumpable (a same-uid process can then neither ptrace it nor open
  ``/proc/<pid>/fd`` or ``/proc/<pid>/mem``), and keeps the result fd, which the runner closes at
  once. It relays the runner's framed messages after checking them, waits for the runner to
  exit, reports the exit status and CPU time, and kills whatever the case left behind.
* the *runner* imports numpy/JAX (the warm part), reports ``ready``, blocks on stdin for one
  case, applies the limits, the seccomp filter and the Python guards, reports ``armed``, runs the
  candidate and frames the value it returned over a pipe to the reporter.

The candidate shares the runner's process, so it can write anything to that pipe; what it can
write there is exactly what it could return, and the reporter accepts one result after
``armed`` and nothing else. The parent alone holds the expected values and compares.

The reporter forks *before* JAX starts its threads, which is why the candidate runs in the warm
process rather than in a fork of it: forking a process that has started XLA's thread pools is
unsafe."""

import builtins
import contextlib
import json
import math
import os
import resource
import select
import signal
import sys

_FRAME_HEADER = 8
_MAX_REQUEST_BYTES = 64 * 1024 * 1024
_int, _float, _str, _bool, _list, _tuple, _dict = int, float, str, bool, list, tuple, dict
_type, _len, _isinstance = type, len, isinstance


class ResultTooLarge(Exception):
    pass


# ---------------------------------------------------------------- runner: value encoding


def _encode(value, budget):
    """JSON-safe form of a returned value. Only plain data crosses; dicts are tagged so a
    returned dict can never pass for an array description."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ResultTooLarge()
    t = _type(value)
    if value is None or t is _bool or t is _str:
        if t is _str:
            budget[0] -= _len(value) // 8
            if budget[0] < 0:
                raise ResultTooLarge()
        return value
    if t is _int:
        if value.bit_length() > 256:
            return {"$unsupported": "int too large"}
        return value
    if t is _float:
        return value
    if t is _list or t is _tuple:
        return [_encode(v, budget) for v in value]
    if t is _dict:
        return {"$dict": [[_encode(k, budget), _encode(v, budget)] for k, v in value.items()]}
    np = sys.modules.get("numpy")
    if np is not None:
        if _isinstance(value, np.generic) and _type(value).__module__ == "numpy":
            return _encode(value.item(), budget)
        if t is np.ndarray:
            return _encode_array(np, value, None, budget)
    jax = sys.modules.get("jax")
    if jax is not None and _isinstance(value, jax.Array) and np is not None:
        return _encode_array(np, np.asarray(value), _sharding_of(value), budget)
    return {"$unsupported": t.__name__[:100]}


def _encode_array(np, arr, sharding, budget):
    budget[0] -= int(arr.size)
    if budget[0] < 0:
        raise ResultTooLarge()
    if arr.dtype.kind not in "biuf":
        return {"$unsupported": f"array of {arr.dtype}"}
    out = {"dtype": str(arr.dtype), "shape": [int(n) for n in arr.shape], "data": arr.tolist()}
    if sharding is not None:
        out["sharding"] = sharding
    return {"$array": out}


def _sharding_of(arr):
    sh = arr.sharding
    desc = {
        "type": _type(sh).__name__,
        "num_devices": len(sh.device_set),
        "shard_shapes": sorted({tuple(int(n) for n in s.data.shape) for s in arr.addressable_shards}),
        "fully_replicated": bool(sh.is_fully_replicated),
    }
    spec = getattr(sh, "spec", None)
    if spec is not None:
        desc["spec"] = [p if p is None or _type(p) is _str else [str(q) for q in p] if _isinstance(p, tuple)
                        else str(p) for p in spec]
    mesh = getattr(sh, "mesh", None)
    if mesh is not None:
        desc["mesh"] = {str(k): int(n) for k, n in mesh.shape.items()}
    return desc


def _decode_arg(value):
    """Inputs arrive as JSON; ``{"$array": ...}`` becomes a numpy array when numpy is loaded."""
    if _isinstance(value, list):
        return [_decode_arg(v) for v in value]
    if _isinstance(value, dict):
        if set(value) == {"$array"} and "numpy" in sys.modules:
            spec = value["$array"]
            np = sys.modules["numpy"]
            return np.asarray(spec["data"], dtype=spec["dtype"]).reshape(spec["shape"])
        if set(value) == {"$tuple"}:
            return tuple(_decode_arg(v) for v in value["$tuple"])
        return {k: _decode_arg(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- runner: process set-up


def _send(fd, message):
    data = json.dumps(message, allow_nan=True).encode()
    data = len(data).to_bytes(_FRAME_HEADER, "big") + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _quiet(fds):
    """Point fds at /dev/null (import-time warnings are noise); return the saved originals."""
    saved = [os.dup(fd) for fd in fds]
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in fds:
        os.dup2(null, fd)
    os.close(null)
    return saved


def _warm(preload):
    info = {}
    if preload in ("numpy", "jax"):
        import numpy  # noqa: F401
    if preload == "jax":
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: F401

        try:
            from jax import shard_map
        except ImportError:
            from jax.experimental import shard_map  # noqa: F401
        info["devices"] = len(jax.devices())
        jax.jit(lambda x: x + 1)(jnp.zeros(8)).block_until_ready()
    return info


def _read_request():
    chunks, total = [], 0
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        total += len(chunk)
        if total > _MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        chunks.append(chunk)
    return json.loads(b"".join(chunks))


def _vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _tasks_of_uid(uid):
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line[:4] in ("Uid:", "Thre"))
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, ValueError, KeyError):
            continue
    return count


def _apply_limits(limits, dedicated_uid):
    """Limits count from now: the address space the interpreter and libraries already hold and
    the CPU the warm-up used are not charged to the candidate."""
    applied = {}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    as_limit = _vm_bytes() + int(limits["address_space_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    applied["address_space_bytes"] = as_limit
    cpu = math.ceil(_cpu_seconds() + float(limits["cpu_seconds"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    applied["cpu_rlimit"] = cpu
    fsize = int(limits["max_file_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    highest = max(int(n) for n in os.listdir("/proc/self/fd"))
    nofile = max(int(limits["max_open_files"]), highest + 16)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    applied["max_open_files"] = nofile
    if dedicated_uid:
        # RLIMIT_NPROC counts the tasks of the uid (within this user namespace, for bubblewrap);
        # the uid is this sandbox's alone, so the cap is the tasks already running (reporter,
        # runner threads) plus the candidate's allowance.
        nproc = _tasks_of_uid(os.getuid()) + int(limits["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        applied["max_processes"] = nproc
    return applied


_DENIED_EVENTS = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "os.kill", "os.killpg", "signal.pthread_kill",
})


def _install_guards():
    """Python-level audit hook (defence in depth only; the OS layers are the real boundary)."""

    def hook(event, args):
        if event in _DENIED_EVENTS:
            raise PermissionError(f"{event} is not allowed in the sandbox")

    sys.addaudithook(hook)


def _run_candidate(request):
    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    exec(compile(request["source"], "<candidate>", "exec"), namespace)
    fn = namespace.get(request["entry"])
    if not callable(fn):
        raise NameError(f"the submission defines no function {request['entry']!r}")
    args = _decode_arg(request.get("args", []))
    kwargs = _decode_arg(request.get("kwargs", {}))
    return fn(*args, **kwargs)


def _describe_exception(exc):
    try:
        message = _str(exc)[:300]
    except BaseException:
        message = "<unprintable>"
    return {"kind": "raised", "type": _type(exc).__name__[:100], "message": message}


def runner(cfg, out, ack):
    saved = _quiet([1, 2])
    try:
        sys.path[:0] = cfg["sys_path"]
        info = _warm(cfg["preload"])
        lib = None
        if cfg["seccomp"]:
            lib = load_libseccomp()  # noqa: F821 - defined by child_seccomp.py, sent first
            if lib is None:
                raise OSError("libseccomp is not available")
        _send(out, {"kind": "ready", "uid": os.getuid(), "info": info})
        request = _read_request()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        applied = _apply_limits(request["limits"], cfg["dedicated_uid"])
        if lib is not None:
            install_seccomp(lib)  # noqa: F821
        cpu_at_arm = _cpu_seconds()
        if cfg["python_guards"]:
            _install_guards()
        for fd, orig in zip((1, 2), saved, strict=True):
            os.dup2(orig, fd)
            os.close(orig)
        _send(out, {"kind": "armed", "uid": os.getuid(), "seccomp": lib is not None,
                    "guards": cfg["python_guards"], "limits": applied, "cpu_at_arm": cpu_at_arm})
        # Wait until the reporter has passed "armed" on to the parent: from then on anything that
        # goes wrong is the candidate's doing, so killing the reporter early cannot turn a case
        # into an unscored sandbox fault.
        if os.read(ack, 1) != b"k":
            raise OSError("the reporter did not acknowledge")
        os.close(ack)
    except BaseException as exc:  # before any candidate code: the sandbox's own failure
        os.write(saved[1] if saved else 2, f"harness set-up failed: {exc!r}\n".encode())
        os._exit(70)
    try:
        value = _run_candidate(request)
        message = {"kind": "value", "value": _encode(value, [int(cfg["max_result_items"])])}
    except ResultTooLarge:
        message = {"kind": "oversize"}
    except BaseException as exc:
        message = _describe_exception(exc)
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:
        pass
    try:
        _send(out, message)
    except BaseException:
        os._exit(71)
    os._exit(0)


# ---------------------------------------------------------------- reporter


class _Frames:
    """Accepts ``ready``, ``armed`` and then exactly one result, in that order."""

    ORDER = ("ready", "armed", "result")
    RESULT_KINDS = ("value", "raised", "oversize")

    def __init__(self, out_fd, max_bytes, ack_fd):
        self.out_fd, self.max_bytes, self.ack_fd = out_fd, max_bytes, ack_fd
        self.buf = b""
        self.stage = 0
        self.result = None
        self.error = None

    def feed(self, data):
        if self.error:
            return
        self.buf += data
        while self.error is None and len(self.buf) >= _FRAME_HEADER:
            n = int.from_bytes(self.buf[:_FRAME_HEADER], "big")
            if n > self.max_bytes:
                self._fail("result larger than the limit")
                return
            if len(self.buf) < _FRAME_HEADER + n:
                return
            body, self.buf = self.buf[_FRAME_HEADER:_FRAME_HEADER + n], self.buf[_FRAME_HEADER + n:]
            self._accept(body)

    def _fail(self, why):
        self.error, self.buf = why, b""

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
            self.result = _clean_result(msg)
        else:
            self._fail("unknown result kind")
            return
        self.stage += 1


def _clean_result(msg):
    kind = msg["kind"]
    if kind == "value":
        return {"kind": "value", "value": msg.get("value")}
    if kind == "raised":
        return {"kind": "raised", "type": str(msg.get("type"))[:100],
                "message": str(msg.get("message"))[:300]}
    return {"kind": "oversize"}


def emit(fd, message):
    data = (json.dumps(message, allow_nan=True) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def reporter(cfg, pid, pipe_r, ack_w):
    out = cfg["result_fd"]
    os.close(0)
    frames = _Frames(out, int(cfg["max_result_bytes"]), ack_w)
    try:
        waiter = os.pidfd_open(pid)
    except (AttributeError, OSError):
        waiter = None
    status = None
    pipe_open = True
    while status is None:
        fds = [pipe_r] if pipe_open else []
        if waiter is not None:
            fds.append(waiter)
        ready, _, _ = select.select(fds, [], [], 0.05 if waiter is None else None)
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


def main():
    cfg = json.loads(sys.argv[1])
    pipe_r, pipe_w = os.pipe()
    ack_r, ack_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(cfg["result_fd"])
        os.close(pipe_r)
        os.close(ack_w)
        runner(cfg, pipe_w, ack_r)
    os.close(pipe_w)
    os.close(ack_r)
    import ctypes

    # Not dumpable: the runner (same uid) can no longer ptrace this process or open its fds.
    if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        os.kill(pid, signal.SIGKILL)
        os._exit(72)
    reporter(cfg, pid, pipe_r, ack_w)
