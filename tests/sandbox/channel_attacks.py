"""Covert channels between two cases that run at the same time: a *sender* case raises a byte
(0xA5, one bit per shared file or directory) on something both cases can reach, and holds it; a
*receiver* case running alongside looks for it. Each channel is written so that it does carry
the byte between two ordinary processes of the host (test_channel_attacks checks that first), so
a receiver inside the sandbox that sees nothing saw nothing because the sandbox closed the channel.

The targets are files and directories of the interpreter's standard library that no program
imports (only their presence and size is looked at beforehand: stat makes no event, takes no lock):
every tier shows them to every case, read-only, as the same inodes of the host."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

BYTE = 0xA5
BITS = [(BYTE >> (7 - i)) & 1 for i in range(8)]

PRELUDE = textwrap.dedent('''
    import ctypes, errno, fcntl, os, select, signal, struct, time

    _FILES = ["antigravity.py", "this.py", "tabnanny.py", "turtle.py", "webbrowser.py", "symtable.py",
              "pyclbr.py", "timeit.py"]
    _PACKAGES = ["idlelib", "turtledemo", "wsgiref", "xmlrpc", "dbm", "curses", "lib2to3", "tomllib",
                 "zoneinfo", "sqlite3"]
    _FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux

    def targets():
        base = os.path.dirname(os.__file__)
        return [os.path.join(base, name) for name in _FILES]

    def package_inits():
        """8 non-empty __init__.py files, each alone in its package directory."""
        base = os.path.dirname(os.__file__)
        found = [os.path.join(base, p, "__init__.py") for p in _PACKAGES]
        return [f for f in found if os.path.exists(f) and os.path.getsize(f) > 0][:8]

    def hold(seconds, touch=None):
        """Keep the signal up for seconds (touch: redo it every few milliseconds)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if touch is not None:
                touch()
            time.sleep(0.01)

    def read_some(paths):
        for p in paths:
            with open(p, "rb") as f:
                f.read(64)

    def bit(i):
        return 0x80 >> i

    def libc():
        return ctypes.CDLL(None, use_errno=True)
    ''')


@dataclass(frozen=True)
class Channel:
    name: str
    send: str  # body of send(bits, seconds): raises the byte, holds it for seconds
    receive: str  # body of receive(seconds): the byte it saw (an int), or raises
    private_only: bool = False  # the plain tier shares the host's /dev/shm and IPC (documented)

    def sender_source(self) -> str:
        return _program(self.send, "bits, seconds", "send")

    def receiver_source(self) -> str:
        return _program(self.receive, "seconds", "receive")


def _program(body: str, params: str, name: str) -> str:
    """body as a function, wrapped in attack(*args): returns {"got": ..., "from": t0, "to": t1}
    (wall-clock times, which every tier shares with the host, so that the test can check the
    two cases' windows overlapped); a refusal comes back as "denied:<error>"."""
    inner = textwrap.indent(textwrap.dedent(body).strip(), " " * 4)
    return (
        f"{PRELUDE}\ndef {name}({params}):\n{inner}\n\n"
        "def attack(*args):\n"
        "    t0 = time.time()\n"
        "    try:\n"
        f"        got = {name}(*args)\n"
        "    except BaseException as e:\n"
        "        got = 'denied:%s:%s' % (type(e).__name__, getattr(e, 'errno', ''))\n"
        "    return {'got': got, 'from': t0, 'to': time.time()}\n"
    )


_POLL_RECEIVE = '''
    got, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for i, fd in enumerate(fds):
            if probe(fd):
                got |= bit(i)
        time.sleep(0.02)
    return got
'''

_WATCH_RECEIVE = '''
    got, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select(fds, [], [], 0.05)
        for fd in ready:
            got |= bit(fds.index(fd))
            os.read(fd, 1 << 16)
    return got
'''

_OPEN_HELD = '''
    fds = []
    for path, b in zip(targets(), bits):
        if b:
            fds.append(os.open(path, os.O_RDONLY))
'''

FLOCK = Channel(
    "flock",
    send=_OPEN_HELD + '''
    for fd in fds:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    hold(seconds)
    ''',
    receive='''
    fds = [os.open(p, os.O_RDONLY) for p in targets()]
    def probe(fd):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    ''' + _POLL_RECEIVE,
)

POSIX_LOCK = Channel(
    "posix_lock",
    send=_OPEN_HELD + '''
    for fd in fds:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # F_SETLK, a read lock
    hold(seconds)
    ''',
    receive='''
    fds = [os.open(p, os.O_RDONLY) for p in targets()]
    def probe(fd):  # would a write lock conflict? (F_GETLK needs no write access)
        found = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0))
        return struct.unpack(_FLOCK, found)[0] != fcntl.F_UNLCK
    ''' + _POLL_RECEIVE,
)

OFD_LOCK = Channel(
    "ofd_lock",
    send=_OPEN_HELD + '''
    for fd in fds:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, fcntl.F_RDLCK, 0, 0, 0, 0))
    hold(seconds)
    ''',
    receive='''
    fds = [os.open(p, os.O_RDONLY) for p in targets()]
    def probe(fd):
        found = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0))
        return struct.unpack(_FLOCK, found)[0] != fcntl.F_UNLCK
    ''' + _POLL_RECEIVE,
)

# A write lease is granted only while nobody else has the file open: trying for one tells the
# receiver whether the sender holds (and read-leases) the file.
LEASE = Channel(
    "lease",
    send=_OPEN_HELD + '''
    for fd in fds:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError:
            pass  # the open file alone is the signal
    hold(seconds)
    ''',
    receive='''
    got, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for i, path in enumerate(targets()):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except BlockingIOError:  # EAGAIN: someone else has it open
                got |= bit(i)
            finally:
                os.close(fd)
        time.sleep(0.02)
    return got
    ''',
)

INOTIFY = Channel(
    "inotify",
    send='''
    chosen = [p for p, b in zip(targets(), bits) if b]
    hold(seconds, lambda: read_some(chosen))
    ''',
    receive='''
    c = libc()
    fds = []
    for path in targets():
        fd = c.inotify_init1(os.O_NONBLOCK)
        if fd < 0 or c.inotify_add_watch(fd, path.encode(), 0x1 | 0x20) < 0:  # IN_ACCESS | IN_OPEN
            raise OSError(ctypes.get_errno(), "inotify")
        fds.append(fd)
    ''' + _WATCH_RECEIVE,
)

FANOTIFY = Channel(
    "fanotify",
    send=INOTIFY.send,
    receive='''
    c = libc()
    c.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    fds = []
    for path in targets():
        # FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_NONBLOCK: what an unprivileged process may ask for
        fd = c.fanotify_init(0x200 | 0x2, os.O_RDONLY)
        if fd < 0 or c.fanotify_mark(fd, 0x1, 0x1 | 0x20, -100, path.encode()) < 0:  # ADD, ACCESS|OPEN
            raise OSError(ctypes.get_errno(), "fanotify")
        fds.append(fd)
    ''' + _WATCH_RECEIVE,
)

# dnotify: a directory's fd, fcntl(F_NOTIFY), a signal when a file in it is read; one real-time
# signal per directory (F_SETSIG) says which.
DNOTIFY = Channel(
    "dnotify",
    send='''
    chosen = [p for p, b in zip(package_inits(), bits) if b]
    hold(seconds, lambda: read_some(chosen))
    ''',
    receive='''
    sigs = [signal.SIGRTMIN + i for i in range(8)]
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    for i, init in enumerate(package_inits()):
        fd = os.open(os.path.dirname(init), os.O_RDONLY)
        fcntl.fcntl(fd, 10, sigs[i])  # F_SETSIG
        fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
    got, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        info = signal.sigtimedwait(sigs, 0.05)
        if info is not None:
            got |= bit(info.si_signo - signal.SIGRTMIN)
    return got
    ''',
)

# Every lock a case could take shows in the host's /proc/locks, by inode.
PROC_LOCKS = Channel(
    "proc_locks",
    send=FLOCK.send.replace("fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)",
                            "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n        "
                            "fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)"),
    receive='''
    inodes = [os.stat(p).st_ino for p in targets()]
    got, shown, end = 0, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        with open("/proc/locks") as f:
            text = f.read()
        shown = max(shown, len(text))
        for token in text.split():
            if token.count(":") == 2 and token.split(":")[2].isdigit():
                ino = int(token.split(":")[2])
                if ino in inodes:
                    got |= bit(inodes.index(ino))
        time.sleep(0.02)
    return [got, shown]
    ''',
)

# The page cache: the sender keeps its 1-files cached and evicts its 0-files over and over; the
# receiver asks, without a clock, whether a page is cached (preadv2 with RWF_NOWAIT fails with
# EAGAIN when it is not), and takes each file's majority answer.
PAGE_CACHE = Channel(
    "page_cache",
    send='''
    fds = [os.open(p, os.O_RDONLY) for p in targets()]
    def touch():
        for fd, b in zip(fds, bits):
            if b:
                os.pread(fd, 4096, 0)
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    hold(seconds, touch)
    ''',
    receive='''
    fds = [os.open(p, os.O_RDONLY) for p in targets()]
    cached, probes, end = [0] * 8, 0, time.monotonic() + seconds
    while time.monotonic() < end:
        probes += 1
        for i, fd in enumerate(fds):
            try:
                os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
                cached[i] += 1
            except BlockingIOError:
                pass
        time.sleep(0.05)
    return sum(bit(i) for i in range(8) if cached[i] * 2 > probes)
    ''',
)

# Shared memory: a POSIX shared-memory file and a SysV segment, both open to everyone. The
# receiver gets the key and name as the sender's "bits" would be guessed (both are passed in).
SHARED_MEMORY = Channel(
    "shared_memory",
    send='''
    name, key = bits
    with open("/dev/shm/" + name, "wb") as f:
        f.write(bytes([0xA5]))
    os.chmod("/dev/shm/" + name, 0o644)
    c = libc()
    c.shmat.restype = ctypes.c_void_p
    shm = c.shmget(key, 4096, 0o1000 | 0o666)  # IPC_CREAT
    if shm >= 0:
        ctypes.memmove(c.shmat(shm, None, 0), bytes([0xA5]), 1)
    try:
        hold(seconds)
    finally:
        os.unlink("/dev/shm/" + name)
        if shm >= 0:
            c.shmctl(shm, 0, None)  # IPC_RMID
    ''',
    receive='''
    name, key, window = seconds
    c = libc()
    c.shmat.restype = ctypes.c_void_p
    got, end = 0, time.monotonic() + window
    while time.monotonic() < end:
        try:
            with open("/dev/shm/" + name, "rb") as f:
                got |= f.read(1)[0]
        except OSError:
            pass
        shm = c.shmget(key, 0, 0)
        if shm >= 0:
            got |= ctypes.string_at(c.shmat(shm, None, 0o10000), 1)[0]  # SHM_RDONLY
        time.sleep(0.02)
    return got
    ''',
    private_only=True,
)

CHANNELS = (FLOCK, POSIX_LOCK, OFD_LOCK, LEASE, INOTIFY, FANOTIFY, DNOTIFY, PROC_LOCKS, PAGE_CACHE, SHARED_MEMORY)
