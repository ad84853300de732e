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
pid namespace, kills the case's pid 1 when the service closes its link or when the case holds
more memory than it may (_CaseMemory, counted every 20 ms once the case has been sent), and exits
only once no process of the case's uid is left in the sandbox; pid 1 keeps root until the harness's ``main()``
splits into the reporter's and the runner's uids (gVisor's kernel lets a process signal its
namespace's init when the uids match)."""
# ruff: noqa: F821 - arm_seccomp_first(), main(), _import_profile(), load_libseccomp(), compile_seccomp() and
# prepare_channel_filter() come from earlier parts of the program

import contextlib
import ctypes
import gc
import json
import os
import re
import select
import signal
import socket
import sys
import time

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
# gvisor: calls a lane's case is refused on top of the deny-list, so that the memory a case holds
# is where its leader can count it: memfd_create (an unlinked file in no size-capped file system,
# held by a descriptor; EPERM), fcntl F_SETPIPE_SZ (pipe buffers of 1 MiB; EPERM), and setting
# extended attributes (setxattr, lsetxattr, fsetxattr: gVisor's tmpfs keeps their values in its
# kernel's heap, outside the tmpfs size cap and every process's count; EOPNOTSUPP, what a file
# system without them answers, which copying code such as shutil's passes over). Per
# architecture: (memfd_create,), (the three setxattr calls), fcntl.
_LANE_NUMBERS = {"x86_64": ((319,), (188, 189, 190), 72), "aarch64": ((279,), (5, 6, 7), 25),
                 "riscv64": ((279,), (5, 6, 7), 25)}
_EOPNOTSUPP = 95
_UNFOUND_LOOKS = 3  # looks in a row a group's threads may be out of sight before it counts as hiding
_THREAD_SEARCH = 256  # pids above a thread group's exited leader searched for its live threads
_SHM_INFO, _MSG_INFO, _SEM_INFO = 14, 12, 19  # totals of the caller's IPC namespace
# What gVisor's kernel holds per message and per semaphore beyond the bytes queued (generous:
# 1000 sets of 32000 semaphores took 169 MiB of a lane's group, about 5.5 bytes each)
_MSG_OVERHEAD, _SEM_BYTES, _SEM_SET_BYTES = 256, 16, 1024
_F_SETPIPE_SZ = 1031
# How long a lane's leader waits for its case's processes to be gone (the service waits 10 s for
# its answer before it ends the whole lane)
_CLEANUP_SECONDS = 6.0
_LANE_FILTER: list = []  # built once by the zygote, loaded by each case's pid 1
_ZYGOTE_VM: list = []  # the zygote's (VmSize, VmRSS, VmData) in kB, as every fork of it starts


class _ShmInfo(ctypes.Structure):
    _fields_ = [("used_ids", ctypes.c_int), ("shm_tot", ctypes.c_ulong), ("shm_rss", ctypes.c_ulong),
                ("shm_swp", ctypes.c_ulong), ("swap_attempts", ctypes.c_ulong), ("swap_successes", ctypes.c_ulong)]


class _IpcInts(ctypes.Structure):  # struct msginfo and struct seminfo: ten ints at most
    _fields_ = [("v", ctypes.c_int * 10)]


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
                with open(f"/proc/{entry}/status", "rb") as f:
                    real = _status_field(f.read(4096), b"Uid").split()[:1]  # (not a name's forged line)
            except OSError:
                continue
            if real == [b"%d" % uid]:
                pids.append(int(entry))
    return pids


def _rmdir_failed(path):
    try:
        os.rmdir(path)
    except OSError:
        return True
    return False


def _prepare_lane_filter():
    """The lane's extra filter (see _LANE_NUMBERS), as classic BPF, built once by the zygote."""
    machine = os.uname().machine
    arch, x32, _ = _ARCHES[machine]
    refused, unsupported, fcntl = _LANE_NUMBERS[machine]
    refuse = _ret_errno(1)  # EPERM
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _ret_errno(38)), (_LD_W_ABS, 0, 0, 0)]
    if x32:
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _ret_errno(38))]
    for nr in refused:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, refuse)]
    for nr in unsupported:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _ret_errno(_EOPNOTSUPP))]
    prog += [(_JEQ, 0, 3, fcntl), (_LD_W_ABS, 0, 0, 16 + 8 * 1), (_JEQ, 0, 1, _F_SETPIPE_SZ), (_RET, 0, 0, refuse),
             (_RET, 0, 0, _RET_ALLOW)]
    _LANE_FILTER.append((_Instruction * len(prog))(*prog))


def _install_lane_filter(libc):
    insns = _LANE_FILTER[0]
    fprog = _Program(len(insns), ctypes.cast(insns, ctypes.POINTER(_Instruction)))
    _check(libc.prctl(22, 2, ctypes.byref(fprog), 0, 0), "lane filter")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


_VM = re.compile(rb"Vm(Size|RSS|Data):\s*(\d+)")


def _vm_kib(text):
    """VmSize, VmRSS and VmData (kB) from the text of a /proc status file."""
    vm = dict(_VM.findall(text))
    return int(vm.get(b"Size", 0)), int(vm.get(b"RSS", 0)), int(vm.get(b"Data", 0))


def _status_field(text, name):
    """The value of line name of a /proc status file (b"" if none). The last such line: a task's
    name, on the first line, is its own to choose (PR_SET_NAME) and shown as it is, so a line
    that says "(zombie)", or a line break and a line of its own making, may come earlier."""
    found = re.findall(rb"^%s:[ \t]*(.*)$" % name, text, re.M)
    return found[-1] if found else b""


def _dying(text):
    """Whether the State line of a task's status says it has exited: "Z (zombie)" or "X (dead)"."""
    state = _status_field(text, b"State")
    return b"(zombie)" in state or b"(dead)" in state


def _zombie(text):
    return b"(zombie)" in _status_field(text, b"State")


def _own_vm_kib():
    with open("/proc/self/status", "rb") as f:
        return _vm_kib(f.read())


class _CaseMemory:
    """What a lane's case holds in gVisor's kernel, as its leader counts it (bytes): for each
    process of its pid namespace, its resident pages (those it shares copy-on-write with the
    zygote and its other forks included: they become its own as either writes, and charging them
    only beyond the zygote's let a fork bomb hold 1.8 GiB more than it was charged), plus the
    address space of its mappings that are not private and writable beyond the zygote's (a
    shared mapping another process filled holds pages that are in no resident count: this counts
    it by its size); plus the SysV shared memory, message queues and semaphores of its IPC
    namespace (the leader's own). A page two processes share is counted twice (never once too
    few); a process that gives up mappings it started with can map as much shared memory
    uncounted (at most the zygote's own, which the lane's group leaves room for); tmpfs and pipes
    are bounded apart (their size caps, and the lane filter: _LANE_NUMBERS; see docs/sandbox.md).

    Each look costs few system calls, since each is slow when the case keeps the CPU busy (a look
    waits its turn for every call): the status file of each process is opened once and read
    again in place (gVisor regenerates it at offset 0; a process that has gone reads as dead,
    and the open file is its task's, never a reused pid's)."""

    def __init__(self, libc, case_proc):
        self.libc = libc
        self.case_proc = case_proc
        size, _, data = _ZYGOTE_VM[0]
        self.base_mapped = size - data
        self.files = {}  # pid (the case's namespace's) -> (its open status file, what it held)
        self.uncountable = False  # a process held memory the count could not see
        self.unfound = {}  # pid -> looks in a row its exited leader's live threads were not found
        self.shm, self.ints = _ShmInfo(), _IpcInts()

    def _held(self, text):
        size, rss, data = _vm_kib(text)
        return (rss + max(0, size - data - self.base_mapped)) << 10

    def _ipc(self):
        total = 0
        if self.libc.shmctl(0, _SHM_INFO, ctypes.byref(self.shm)) >= 0:
            total += self.shm.shm_tot * 4096  # pages, touched or not
        if self.libc.msgctl(0, _MSG_INFO, ctypes.byref(self.ints)) >= 0:
            v = self.ints.v  # msgpool (queues), msgmap (messages), ..., msgtql (bytes)
            total += max(v[6], 0) + max(v[1], 0) * _MSG_OVERHEAD + max(v[0], 0) * _MSG_OVERHEAD
        if self.libc.semctl(0, 0, _SEM_INFO, ctypes.byref(self.ints)) >= 0:
            v = self.ints.v  # ..., semusz (sets, index 7), ..., semaem (semaphores, index 9)
            total += max(v[9], 0) * _SEM_BYTES + max(v[7], 0) * _SEM_SET_BYTES
        return total

    def _live_thread(self, entry):
        """The status of a thread of process entry that still runs; b"" if it has none; None if
        it has threads this cannot find. gVisor lists neither such a process's task directory nor
        its threads in /proc, though /proc/<tid> of each answers: tids are looked for just above
        the leader's pid (where the threads it made while it lived are, unless the case has
        made and ended many tasks since)."""
        threads = _status_field(self._zombie_text(entry), b"Threads")
        if not threads.isdigit() or int(threads) <= 1:
            return b""
        pid = int(entry)
        exiting = False
        for tid in range(pid + 1, pid + 1 + _THREAD_SEARCH):
            try:
                with open(f"{self.case_proc}/{tid}/status", "rb") as f:
                    text = f.read(4096)
            except OSError:
                continue
            if _status_field(text, b"Tgid") != b"%d" % pid:
                continue
            if not _dying(text):
                return text
            exiting = True
        # Threads of the group found, every one ending: the whole group is exiting (a CPU limit
        # or a kill reached it), and what it held is being given back, not hidden.
        return b"" if exiting else None

    def _unfound(self, entry):
        """Whether process entry's live threads have now been missed for _UNFOUND_LOOKS looks in
        a row: a group that a CPU limit or a kill is ending can show its leader exited and its
        thread count not yet down while no thread of it is left to read, for a moment; a group
        whose threads stay out of sight is hiding what it holds."""
        self.unfound[entry] = self.unfound.get(entry, 0) + 1
        return self.unfound[entry] >= _UNFOUND_LOOKS

    def _uncountable(self, limit):
        """What measure answers for memory it cannot count: past any allowance."""
        self.uncountable = True
        return limit + 1 if limit != float("inf") else 0

    def _zombie_text(self, entry):
        try:
            with open(f"{self.case_proc}/{entry}/status", "rb") as f:
                return f.read(4096)
        except OSError:
            return b""

    def measure(self, limit):
        """The case's count, or, as soon as what has been counted passes limit, that much: the
        largest processes are read first, so a case past its allowance is found early."""
        total = self._ipc()
        for entry, (fd, _) in sorted(self.files.items(), key=lambda item: -item[1][1]):
            if total > limit:
                return total
            try:
                text = os.pread(fd, 4096, 0)
            except OSError:
                text = b""
            if _zombie(text):
                # A thread-group leader that exited while its other threads run: gVisor shows it
                # as a zombie holding nothing, though the group's memory is all there. Counted
                # through a live thread of the group (each one's status shows the group's pages);
                # one that cannot be found is memory that cannot be counted: over the allowance.
                text = self._live_thread(entry)
                if text is None:
                    if self._unfound(entry):
                        return self._uncountable(limit)
                    total += self.files[entry][1]  # what it held at the last look, meanwhile
                    continue
            self.unfound.pop(entry, None)
            if not text or _dying(text):
                os.close(fd)
                del self.files[entry]
                continue
            held = self._held(text)
            self.files[entry] = (fd, held)
            total += held
        try:
            entries = os.listdir(self.case_proc)
        except OSError:
            entries = []
        for entry in entries:  # processes forked since the last look
            if total > limit:
                return total
            if entry.isdigit() and entry not in self.files:
                try:
                    fd = os.open(f"{self.case_proc}/{entry}/status", os.O_RDONLY | os.O_CLOEXEC)
                    text = os.pread(fd, 4096, 0)
                except OSError:
                    continue
                if _zombie(text):
                    live = self._live_thread(entry)
                    if live is None:
                        os.close(fd)  # looked at afresh next time
                        if self._unfound(entry):
                            return self._uncountable(limit)
                        continue
                    text = live or text
                self.unfound.pop(entry, None)
                held = self._held(text)
                self.files[entry] = (fd, held)
                total += held
        return total


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
    case_proc = _case_root_path(zcfg, token) + "/proc"
    memory = _CaseMemory(libc, case_proc)
    limit = None  # set when the service has sent the case (a byte on the link): from then on,
    # the case's memory is watched, counted from its warm state
    killed = over = False
    peak = 0  # the most it held beyond its warm state
    status = None
    while status is None:
        got, raw = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            status = raw
            break
        ready, _, _ = select.select(watched, [], [], None if limit is None or killed else zcfg["watch_seconds"])
        if _LINK_FD in ready:
            try:
                said = os.read(_LINK_FD, 64)
            except OSError:
                said = b""
            if not said:  # the service ends the case
                if not killed:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                watched = [wake_r]
            elif limit is None:
                limit = memory.measure(float("inf")) + zcfg["case_memory_bytes"]
                if memory.uncountable:  # already, as the case began: ended below as over
                    limit = 0
        if wake_r in ready:
            os.read(wake_r, 512)
        if limit is not None and not killed:
            used = memory.measure(limit)
            peak = max(peak, used - limit + zcfg["case_memory_bytes"])
            if used > limit:
                # Past its allowance: the whole case goes (pid 1, and with it its namespace)
                # before gVisor's kernel, and every other case in it, runs out of memory.
                os.kill(pid, signal.SIGKILL)
                killed = True
                over = True
    # The kernel kills the namespace with its init; wait until it has. Every process of the case
    # is in its pid namespace (the filter refuses new ones), so an empty namespace is the end of
    # the case. Looking costs one directory read; what is left is also killed by uid now and then
    # (that reads the status of every process of the sandbox, all cases': on a busy machine a
    # sweep per look kept a leader past the service's patience, which then ended the whole lane).
    deadline = time.monotonic() + _CLEANUP_SECONDS
    sweep = time.monotonic() + 0.05
    while _case_tasks_left(case_proc):
        now = time.monotonic()
        if now > deadline:
            os._exit(99)  # the service sees an unclean end and discards the whole sandbox
        if now > sweep:
            for task in _uid_tasks(uid):
                with contextlib.suppress(OSError):
                    os.kill(task, signal.SIGKILL)
            sweep = time.monotonic() + 0.25
        select.select([], [], [], 0.005)
    root = _case_root_path(zcfg, token)
    # (no root when the case failed before making it)
    if os.path.isdir(root) and (libc.umount2(root.encode(), _MNT_DETACH) != 0 or _rmdir_failed(root)):
        os._exit(98)  # the same: nothing of a case may stay for the next
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    # "clean <status>[ memory <peak bytes>]": the leader ended the case for its memory
    word = f" memory {peak}" if over else ""
    with contextlib.suppress(OSError):
        os.write(_LINK_FD, f"clean {code}{word}\n".encode())
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
        _install_lane_filter(libc)
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
    # One malloc arena in every fork (mallopt M_ARENA_MAX): glibc reserves 64 MiB of address space
    # (PROT_NONE) for each further arena a new thread gets, which a case's leader would count as
    # mappings beyond the zygote's (_CaseMemory): eight threads were counted as 512 MiB a process.
    ctypes.CDLL(None).mallopt(-8, 1)
    _ZYGOTE_VM.append(_own_vm_kib())
    size, rss, data = _ZYGOTE_VM[0]
    # what each process of a case starts with (the service sizes the lane's control group by it)
    control.sendall(json.dumps({"kind": "ready", "rss": rss << 10, "mapped": (size - data) << 10}).encode() + b"\n")
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
        _prepare_lane_filter()
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
