"""The fork server ("zygote"): part of the harness program (see child/harness.py), used instead
of ``main()`` when children are forked rather than started. Stdlib only.

The zygote imports numpy (and JAX, without starting its backend) once, then loops: for each
request from the service it checks that it is still single-threaded, forks, and hands the
service a pidfd of the fork. It never runs candidate code and never reads anything but the
service's requests; the case's processes cannot name it (another pid namespace, or another uid).

The fork (the case *leader*) takes the case's pipes, starts a session of its own and waits for
one byte on stdin: the service sends it once it has moved the leader into the case's control
group. Then, where each fork makes its own namespaces (``fork: namespaces``, the bubblewrap
tier's), the leader unshares fresh mount, pid, IPC, network, UTS and
cgroup namespaces and forks the case's pid 1, which mounts a private size-capped tmpfs on /tmp
and /dev/shm and its own read-only /proc (with /proc/locks hidden); the leader only waits for it
and exits with it (killing the leader kills pid 1 through its parent-death signal, and with it
the namespace). Where forks get private host directories only (``fork: directories``, the
plain tier's) the leader itself goes on, in them. Either way the process that
goes on drops to the case's dedicated uid (no capabilities left), sets no_new_privs and runs the
harness's ``main()`` exactly as a started child does: seccomp first, then the reporter and the
runner.

In a lane (``fork: lane``, the gvisor tier's) the zygote runs inside one long-lived gVisor
sandbox (tiers/gvisor_lane.py), where
no fd can be handed in or out: it reads its requests from a unix socket it connects to, and each
leader connects its case's stdin, stdout, stderr, result channel and its own link to the service
to the same socket, each tagged with the case's token. The leader stays root outside the case's
pid namespace, kills the case's pid 1 when the service closes its link, and exits only once no
process of the case's uid is left in the sandbox; pid 1 keeps root until the harness's ``main()``
splits into the reporter's and the runner's uids (gVisor's kernel lets a process signal its
namespace's init when the uids match)."""
# ruff: noqa: F821 - arm_seccomp_first(), main(), _import_profile(), load_libseccomp(), compile_seccomp() and
# prepare_channel_filter() come from earlier parts of the program

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys

_NEW_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000)
# NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWPID | NEWNET
_GVISOR_NAMESPACES = _NEW_NAMESPACES & ~0x00020000  # no NEWNS there: see _gvisor_case_root
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 1 << 12, 1 << 14, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_RESULT_FD = 3  # where the case's result channel sits in the fork
_CASE_FDS = 4  # stdin, stdout, stderr, result channel
_LINK_FD = 4  # gvisor: the leader's own connection to the service
_MNT_DETACH = 2
_GVISOR_REPORTER_UID = 65533  # the reporter inside gVisor (the runner takes the case's uid)


def _reap_finished():
    """Reap the leaders of finished cases (and, as pid 1, any orphan) without waiting."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


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
    _work_dirs(uid)


def _work_dirs(uid):
    for d in ("/tmp/work", "/tmp/home"):
        os.mkdir(d, 0o700)
    os.chdir("/tmp/work")  # first: the zygote may lack the capability to enter another uid's 0700 directory
    for d in ("/tmp/work", "/tmp/home"):
        if uid is not None:
            os.chown(d, uid, uid)


def _case_root_path(zcfg, token):
    return f"{zcfg['cases_dir']}/{token}"


def _gvisor_case_root(libc, zcfg, uid, token):
    """gvisor: gVisor's kernel (Debian's release) accepts unshare(CLONE_NEWNS) but mounts made
    after it still land in the one mount namespace of the sandbox, seen by every process of it.
    So each case gets a root of its own instead, and is chrooted into it: a read-only tmpfs with
    the sandbox's read-only view bound in (the interpreter, packages and libraries; nothing of
    the service's socket), its own size-capped /tmp and /dev/shm, and a /proc of its own pid
    namespace. Its path holds the case's random token, under a directory no case can list.
    (That kernel refuses to remount a bind read-only: what is bound in is read-only already,
    the sandbox's read-only root and binds, and the case's root is root's, 0755.)"""
    root = _case_root_path(zcfg, token)
    os.mkdir(root, 0o700)
    _mount(libc, "tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1048576,mode=0755")
    for link, target in zcfg["symlinks"]:
        os.symlink(target, root + link)
    for d in ("/proc", "/dev", "/tmp"):
        os.mkdir(root + d, 0o755)
    for source in zcfg["binds"]:  # the sandbox's own mounts; a bind takes none of the mounts below it
        point = root + source
        os.makedirs(os.path.dirname(point), 0o755, exist_ok=True)
        if os.path.isdir(source):
            os.makedirs(point, 0o755, exist_ok=True)
        elif not os.path.exists(point):
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY, 0o444))
        _mount(libc, source, point, None, _MS_BIND, None)
    _mount(libc, "/dev", root + "/dev", None, _MS_BIND, None)
    _mount(libc, "tmpfs", root + "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={int(zcfg['shm_bytes'])},mode=1777")
    _mount(libc, "tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(zcfg['tmpfs_bytes'])},mode=1777")
    _mount(libc, "proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY, None)
    os.chroot(root)
    os.chdir("/")
    _work_dirs(uid)


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


def _connect_case(zcfg, token):
    """gvisor: the case's four channels and the leader's link, each a connection to the
    service's socket that names the case and its role (fds 0 to 4 when done)."""
    socks = []
    for role in range(_CASE_FDS + 1):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(zcfg["control_socket"])
        sock.sendall(f"{token}:{role}\n".encode())
        socks.append(sock)
    return [sock.detach() for sock in socks]


def _case_tasks_left(case_proc):
    """Whether any process is left in the case's pid namespace (its own /proc lists exactly
    those, by the namespace's pids)."""
    try:
        return any(entry.isdigit() for entry in os.listdir(case_proc))
    except OSError:
        return False


def _uid_tasks(uid):
    """Pids (this namespace's) of every process of uid in the sandbox."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                        pids.append(int(entry))
            except (OSError, ValueError):
                pass
    return pids


def _rmdir_failed(path):
    try:
        os.rmdir(path)
    except OSError:
        return True
    return False


def _gvisor_leader(libc, zcfg, token, pid, uid):
    """Watch the case's pid 1 and the service's link: when the link closes (the service ends the
    case, or is gone), kill pid 1, which takes the case's pid namespace with it. Exit only when
    no process of the case's uid is left, telling the service how pid 1 ended."""
    for fd in range(_CASE_FDS):
        os.close(fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    watched = [_LINK_FD, wake_r]
    status = None
    while status is None:
        got, raw = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            status = raw
            break
        ready, _, _ = select.select(watched, [], [])
        if _LINK_FD in ready:
            os.kill(pid, signal.SIGKILL)
            watched = [wake_r]
        if wake_r in ready:
            os.read(wake_r, 512)
    case_proc = _case_root_path(zcfg, token) + "/proc"
    for _ in range(500):  # the kernel kills the namespace with its init; wait until it has
        # Every process of the case is in its pid namespace (the filter refuses new ones), so an
        # empty namespace is the end of the case; what is left is killed by uid meanwhile.
        if not _case_tasks_left(case_proc):
            break
        for task in _uid_tasks(uid):
            with contextlib.suppress(OSError):
                os.kill(task, signal.SIGKILL)
        select.select([], [], [], 0.002)
    else:
        os._exit(99)  # the service sees an unclean end and discards the whole sandbox
    root = _case_root_path(zcfg, token)
    # (no root when the case failed before making it)
    if os.path.isdir(root) and (libc.umount2(root.encode(), _MNT_DETACH) != 0 or _rmdir_failed(root)):
        os._exit(98)  # the same: nothing of a case may stay for the next
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    with contextlib.suppress(OSError):
        os.write(_LINK_FD, f"clean {code}\n".encode())
    os._exit(0)


def _case_leader(zcfg, req, fds):
    """The fork: becomes the case (never returns)."""
    if zcfg["fork"] == "lane":
        fds = _connect_case(zcfg, req["token"])
        for target, fd in enumerate(fds):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.closerange(_LINK_FD + 1, 1 << 16)
        os.setsid()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        uid = req["uid"]
        libc = _libc()
        _check(libc.unshare(_GVISOR_NAMESPACES), "unshare")
        pid = os.fork()
        if pid:
            _gvisor_leader(libc, zcfg, req["token"], pid, uid)
        os.close(_LINK_FD)
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent-death signal")
        _gvisor_case_root(libc, zcfg, uid, req["token"])
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        # Root until main() forks: the reporter and the runner each drop to their own uid.
        cfg = dict(req["cfg"], result_fd=_RESULT_FD, reporter_uid=_GVISOR_REPORTER_UID, runner_uid=uid)
        sys.argv[1:] = [json.dumps(cfg)]
        arm_seccomp_first()
        main()
        os._exit(70)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(_CASE_FDS, 1 << 16)  # the control socket and everything else of the zygote
    os.setsid()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if os.read(0, 1) != b"g":  # the service could not place it in the case's group: give up
        os._exit(0)
    uid = req.get("uid")
    libc = _libc()
    if zcfg["fork"] == "namespaces":
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


def _gvisor_zygote_loop(zcfg, control):
    """The zygote's loop inside gVisor: requests are JSON lines on the control connection; a
    leader connects its case's channels itself (_connect_case)."""
    requests = control.makefile("rb")
    control.sendall(b'{"kind": "ready"}\n')
    for line in requests:
        _reap_finished()
        if _threads() != 1:
            control.sendall(b'{"kind": "failed", "error": "zygote not single-threaded"}\n')
            os._exit(75)
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                requests.close()
                control.close()
                _case_leader(zcfg, req, [])
            except BaseException as exc:
                import traceback
                os.write(2, f"harness set-up failed: {exc!r} {traceback.format_exc()}\n".encode())
            os._exit(70)
        control.sendall(json.dumps({"kind": "forked", "threads": _threads()}).encode() + b"\n")
    os._exit(0)  # the service is gone


def zygote_main():
    zcfg = json.loads(sys.argv[1])
    if zcfg["fork"] == "lane":
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.connect(zcfg["control_socket"])
    else:
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
        control.send(json.dumps({"kind": "failed", "error": repr(exc)[:300]}).encode() + b"\n")
        os._exit(70)
    # What the imports made is never collected in a fork: a collection there would touch (and
    # so copy) every page of it.
    gc.freeze()
    if zcfg["fork"] == "lane":
        os.mkdir(zcfg["cases_dir"], 0o711)  # traversable, not listable: each case's root by path only
        _gvisor_zygote_loop(zcfg, control)
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
        _reap_finished()
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
