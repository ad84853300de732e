"""The runner half of the sandbox child (part of the harness program; see child/harness.py):
warm up, take one case from stdin, apply limits, seccomp and guards, run the candidate, and frame
its value to the reporter. Uses child/values.py and child/seccomp.py, which precede it in the
program."""
# ruff: noqa: F821

import builtins
import json
import math
import os
import resource
import sys

_FRAME_HEADER = 8
_MAX_REQUEST_BYTES = 64 * 1024 * 1024


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


def _import_profile(preload):
    """The imports of a profile; they start no thread (the fork server relies on it)."""
    if preload in ("numpy", "jax"):
        import numpy  # noqa: F401
    if preload == "jax":
        import jax
        import jax.numpy  # noqa: F401
        from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: F401

        try:
            from jax import shard_map
        except ImportError:
            from jax.experimental import shard_map  # noqa: F401


def _warm(preload, warm_jit=True):
    info = {}
    # The warm part: imported here, once per child, before any candidate code arrives (a no-op in
    # a fork of the fork server, which imported them already).
    _import_profile(preload)
    if preload == "jax":
        import jax
        import jax.numpy as jnp
        from jax._src.array import ArrayImpl
        from jax.sharding import NamedSharding

        # The backend starts here, before the case: its threads and the address space it maps
        # (about 1 GiB) are part of the warm state the limits count from, as in a started child.
        # (A fork server's forks do this themselves: the zygote must not start it.)
        info["devices"] = len(jax.devices())
        if warm_jit:  # a started child also compiles once; a fork leaves that to the case
            jax.jit(lambda x: x + 1)(jnp.zeros(8)).block_until_ready()
        # The only types whose mesh and spec the encoder reads, fixed before candidate code runs.
        _JAX_TYPES[:] = [ArrayImpl, NamedSharding]
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


def _apply_limits(limits, dedicated_uid, nproc_margin=0):
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
        nproc = _tasks_of_uid(os.getuid()) + int(limits["max_processes"]) + nproc_margin
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
    """Python-level audit hook: a diagnostic that turns casual attempts into a clear
    PermissionError, not a security layer. It runs in the candidate's own interpreter, which can
    switch it off (``_DENIED_EVENTS`` is a global of this program); the OS layers are the
    boundary, and the attack suites run without it."""

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


# Built-in exception classes by name, captured before candidate code runs. A raised exception is
# reported as the nearest of these in its class's MRO: a class the candidate made (whatever it is
# called) is never named, and its message never leaves the process.
_BUILTIN_EXCEPTIONS = {id(v): k for k, v in vars(builtins).items()
                       if isinstance(v, type) and issubclass(v, BaseException)}


def _describe_exception(exc):
    name = "BaseException"
    for cls in _type(exc).__mro__:
        if id(cls) in _BUILTIN_EXCEPTIONS:  # identity: a metaclass cannot fake equality here
            name = _BUILTIN_EXCEPTIONS[id(cls)]
            break
    return {"kind": "raised", "type": name}


def runner(cfg, out, ack):
    saved = _quiet([1, 2])
    try:
        sys.path[:0] = cfg["sys_path"]
        info = _warm(cfg["preload"], cfg.get("warm_jit", True))
        _send(out, {"kind": "ready", "uid": os.getuid(), "info": info})
        request = _read_request()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        applied = _apply_limits(request["limits"], cfg["dedicated_uid"], int(cfg.get("nproc_margin", 0)))
        # The deny-list went on before the harness forked this process (arm_seccomp_first) and
        # is inherited; a second copy of the same filter would add nothing but its build time.
        # What is checked here is that the kernel really holds a filter for this process.
        # (A filter of the host's own, a container runtime's say, does not count as ours.)
        filtered = bool(cfg["seccomp"]) and seccomp_in_force()
        if cfg["seccomp"] and not filtered:
            raise OSError("the seccomp filter is not in force")
        if not channels_closed():  # every tier: no channel to a concurrent case (child/channels.py)
            raise OSError("the channel filter is not in force")
        # The plain tier's Landlock domain (child/landlock.py), applied before the harness forked:
        # what the kernel did, and that it answers.
        landlock = landlock_state()
        if landlock is not None and landlock["abi"] and not landlock_holds():
            raise OSError("the Landlock domain is not in force")
        cpu_at_arm = _cpu_seconds()
        if cfg["python_guards"]:
            _install_guards()
        for fd, orig in zip((1, 2), saved, strict=True):
            os.dup2(orig, fd)
            os.close(orig)
        _send(out, {"kind": "armed", "uid": os.getuid(), "seccomp": filtered,
                    "guards": cfg["python_guards"], "limits": applied, "cpu_at_arm": cpu_at_arm,
                    "landlock": landlock})
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
