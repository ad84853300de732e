"""The fork server ("zygote"): part of the harness program (see child_harness.py), used instead
of ``main()`` when children are forked rather than started. Stdlib only.

The zygote imports numpy (and JAX, without starting its backend) once, then loops: for each
request from the service it checks that it is still single-threaded, forks, and hands the
service a pidfd of the fork. It never runs candidate code and never reads anything but the
service's requests; the case's processes cannot name it (another pid namespace, or another uid).

The fork (the case *leader*) takes the case's pipes, starts a session of its own and waits for
one byte on stdin: the service sends it once it has moved the leader into the case's control
group. Then, in the bubblewrap tier, the leader unshares fresh mount, pid, IPC, network, UTS and
cgroup namespaces and forks the case's pid 1, which mounts a private size-capped tmpfs on /tmp
and /dev/shm and its own read-only /proc (with /proc/locks hidden); the leader only waits for it
and exits with it (killing the leader kills pid 1 through its parent-death signal, and with it
the namespace). In the plain
tier the leader itself goes on, in the case's private directories. Either way the process that
goes on drops to the case's dedicated uid (no capabilities left), sets no_new_privs and runs the
harness's ``main()`` exactly as a started child does: seccomp first, then the reporter and the
runner."""
# ruff: noqa: F821 - arm_seccomp_first(), main(), _import_profile(), load_libseccomp(), compile_seccomp() and
# prepare_channel_filter() come from earlier parts of the program

import ctypes
import gc
import json
import os
import signal
import socket
import sys

_NEW_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000)
# NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWPID | NEWNET
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 1 << 12, 1 << 14, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_RESULT_FD = 3  # where the case's result channel sits in the fork
_CASE_FDS = 4  # stdin, stdout, stderr, result channel


def _threads():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc, source, target, fstype, flags, data):
    _check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                      data and data.encode()), f"mount {target}")


def _private_filesystems(libc, zcfg, uid):
    """In the case's own mount namespace: nothing it mounts propagates back, and /tmp, /dev/shm
    and /proc are its own."""
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
    _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(zcfg['tmpfs_bytes'])},mode=1777")
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(zcfg['shm_bytes'])},mode=1777")
    _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, None)
    # /proc/locks lists every file lock on the host: an empty file instead (as bwrap_argv does).
    _mount(libc, "/dev/null", "/proc/locks", None, _MS_BIND, None)
    _mount(libc, None, "/proc/locks", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None)
    for d in ("/tmp/work", "/tmp/home"):
        os.mkdir(d, 0o700)
        if uid is not None:
            os.chown(d, uid, uid)
    os.chdir("/tmp/work")


def _drop_privileges(libc, uid):
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a non-zero uid: every capability goes
        # The uid change made the process non-dumpable; a started child is dumpable (its exec
        # reset it), and the harness relies on choosing itself which process is not.
        _check(libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    with open("/proc/self/status") as f:
        caps = [line.split()[1] for line in f if line.startswith("CapEff:")]
    if uid is not None and caps != ["0000000000000000"]:
        raise OSError("capabilities survived the uid change")


def _case_leader(zcfg, req, fds):
    """The fork: becomes the case (never returns)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(_CASE_FDS, 1 << 16)  # the control socket and everything else of the zygote
    os.setsid()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if os.read(0, 1) != b"g":  # the service could not place it in the case's group: give up
        os._exit(0)
    uid = req.get("uid")
    libc = _libc()
    if zcfg["isolation"] == "bubblewrap":
        _check(libc.unshare(_NEW_NAMESPACES), "unshare")
        pid = os.fork()
        if pid:
            # The service stops a case with SIGTERM to the leader, which kills pid 1 and exits
            # only once the kernel has emptied the namespace: when the leader is gone, so is
            # every process of the case.
            signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
            _, status = os.waitpid(pid, 0)
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
        _private_filesystems(libc, zcfg, uid)
    else:
        os.chdir(req["cwd"])
        os.environ["HOME"], os.environ["TMPDIR"] = req["home"], req["tmp"]
        tempfile = sys.modules.get("tempfile")
        if tempfile is not None:
            tempfile.tempdir = None  # computed again from TMPDIR if the case asks for it
    _drop_privileges(libc, uid)
    cfg = dict(req["cfg"], result_fd=_RESULT_FD)
    sys.argv[1:] = [json.dumps(cfg)]
    arm_seccomp_first()
    main()


def zygote_main():
    zcfg = json.loads(sys.argv[1])
    control = socket.socket(fileno=int(zcfg["control_fd"]))
    try:
        sys.path[:0] = zcfg["sys_path"]
        _import_profile(zcfg["preload"])
        if zcfg["seccomp"]:
            lib = load_libseccomp()
            if lib is None:
                raise OSError("libseccomp is not available")
            compile_seccomp(lib)
        if sys.platform.startswith("linux"):
            prepare_channel_filter()  # every fork loads it (arm_seccomp_first)
        threads = _threads()
        if threads != 1:
            raise OSError(f"the imports started {threads - 1} threads")
    except BaseException as exc:
        control.send(json.dumps({"kind": "failed", "error": repr(exc)[:300]}).encode())
        os._exit(70)
    # What the imports made is never collected in a fork: a collection there would touch (and
    # so copy) every page of it.
    gc.freeze()
    # A pidfd of itself: the service learns the zygote's pid as the host sees it (for its
    # operators and tests; the service never signals it by pid).
    own = os.pidfd_open(os.getpid())
    socket.send_fds(control, [json.dumps({"kind": "ready"}).encode()], [own])
    os.close(own)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 1 << 16, _CASE_FDS)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the service is gone
        while True:  # leaders of finished cases (and, as pid 1, any orphan)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        # Forking a process with threads is unsafe (a thread may hold a lock forever in the fork):
        # refuse, and let the service start a new zygote.
        if _threads() != 1 or len(fds) != _CASE_FDS:
            control.send(json.dumps({"kind": "failed", "error": "zygote not single-threaded"}).encode())
            os._exit(75)
        req = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            try:
                _case_leader(zcfg, req, fds)
            except BaseException as exc:
                os.write(2, f"harness set-up failed: {exc!r}\n".encode())
            os._exit(70)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        socket.send_fds(control, [json.dumps({"kind": "forked"}).encode()], [pidfd])
        os.close(pidfd)
