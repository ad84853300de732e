"""Landlock for the plain tier: what a case may open on the host's filesystem, enforced by the
kernel (Linux's Landlock LSM), since the plain tier has no mount namespace to hide the rest in.
Stdlib only: part of the harness program (child/harness.py); the service imports it only for
``kernel_abi`` and the access bits.

The rules come from the service as data (policy.landlock_rules, rendered from the plain tier's
``Policy``, the same Plan data the bubblewrap tier binds): ``[access, path]`` pairs, where access
is ``read`` (open and execute beneath path: the interpreter's prefix, each configured package's
own site-packages entries, the system libraries, /proc), ``list`` (list directories beneath
path, open no file: the directory of links the plain tier's sys.path is), ``device`` (read and
write one device file: /dev/null and its like) or ``full`` (everything beneath path: the case's
own working, home and temporary directories). Everything else the ruleset handles is refused:
every file system right the kernel's Landlock ABI knows, TCP bind and connect (ABI 4), and,
where the kernel scopes them (ABI 6), signals to and abstract unix sockets of processes outside
the case.

``apply_landlock`` runs in the process the service started (or the fork server's fork), once
no_new_privs is set and the seccomp filters are loaded, before the harness forks the reporter
and the runner: every process of the case is in the domain."""

import ctypes as _ll_ctypes
import errno as _ll_errno
import os as _ll_os
import stat as _ll_stat

# landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: the same numbers on x86-64,
# arm64 and riscv64 (the generic table).
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_LL_RULE_PATH_BENEATH = 1

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
FS_MAKE_SYM, FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
# Rights that apply to a file as well as to a directory (the kernel refuses the others on a file).
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


def handled_access(abi):
    """(file system rights, network rights, scopes) a ruleset of this ABI handles: all it knows."""
    if abi < 1:
        return 0, 0, 0
    fs = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        fs |= FS_REFER
    if abi >= 3:
        fs |= FS_TRUNCATE
    if abi >= 5:
        fs |= FS_IOCTL_DEV
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


def rule_access(kind, fs):
    """The rights a rule of kind grants beneath its path (masked by what the ruleset handles)."""
    grants = {
        "read": FS_READ_FILE | FS_READ_DIR | FS_EXECUTE,
        "list": FS_READ_DIR,
        "device": FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV,
        "full": fs,
    }
    return grants[kind] & fs


class _RulesetAttr(_ll_ctypes.Structure):
    _fields_ = [("handled_access_fs", _ll_ctypes.c_uint64), ("handled_access_net", _ll_ctypes.c_uint64),
                ("scoped", _ll_ctypes.c_uint64)]


class _PathBeneath(_ll_ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", _ll_ctypes.c_uint64), ("parent_fd", _ll_ctypes.c_int32)]


_LL_STATE: list = []  # what apply_landlock did in this process: {"abi": n} or {"abi": 0, "why": ...}


def kernel_abi():
    """(the highest Landlock ABI the kernel offers this process, why there is none): (0, reason)
    where it is missing, disabled at boot, or refused by a seccomp filter of the host's."""
    libc = _ll_ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = _ll_ctypes.c_long
    _ll_ctypes.set_errno(0)
    abi = libc.syscall(_ll_ctypes.c_long(_LL_CREATE), None, _ll_ctypes.c_size_t(0), _ll_ctypes.c_uint32(_LL_VERSION))
    if abi >= 1:
        return int(abi), None
    err = _ll_ctypes.get_errno()
    why = {_ll_errno.ENOSYS: "the kernel has no Landlock (or a seccomp filter of the host's refuses it)",
           _ll_errno.EOPNOTSUPP: "Landlock is disabled on this kernel (not in the lsm= boot list)",
           _ll_errno.EPERM: "a seccomp filter of the host's refuses Landlock"}
    return 0, why.get(err, f"landlock_create_ruleset failed: {_ll_os.strerror(err)}")


def apply_landlock(spec):
    """Restrict the calling process (single-threaded) and its future children to spec's rules.
    spec: {"rules": [[access, path], ...], "require": bool}. Where the kernel offers no Landlock
    and spec does not require it, nothing is done and the state says why; a failure after the
    kernel said it has Landlock raises OSError (the harness then stops: never half applied)."""
    abi, why = kernel_abi()
    if abi < 1:
        if spec.get("require"):
            raise OSError(f"Landlock is required but unavailable: {why}")
        _LL_STATE[:] = [{"abi": 0, "why": why}]
        return
    libc = _ll_ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = _ll_ctypes.c_long
    fs, net, scoped = handled_access(abi)
    attr = _RulesetAttr(fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct as this ABI knows it
    ruleset = libc.syscall(_ll_ctypes.c_long(_LL_CREATE), _ll_ctypes.byref(attr), _ll_ctypes.c_size_t(size),
                           _ll_ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(_ll_ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for kind, path in spec["rules"]:
            try:
                fd = _ll_os.open(path, _ll_os.O_PATH | _ll_os.O_CLOEXEC)
            except OSError:
                continue  # a path this host lacks: nothing to allow
            try:
                access = rule_access(kind, fs)
                if not _ll_stat.S_ISDIR(_ll_os.fstat(fd).st_mode):
                    access &= FS_FILE_RIGHTS
                if not access:
                    continue
                rule = _PathBeneath(access, fd)
                if libc.syscall(_ll_ctypes.c_long(_LL_ADD_RULE), _ll_ctypes.c_int(ruleset),
                                _ll_ctypes.c_int(_LL_RULE_PATH_BENEATH), _ll_ctypes.byref(rule),
                                _ll_ctypes.c_uint32(0)) != 0:
                    raise OSError(_ll_ctypes.get_errno(), f"landlock_add_rule {path}")
            finally:
                _ll_os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (set already; checked)
            raise OSError(_ll_ctypes.get_errno(), "no_new_privs")
        if libc.syscall(_ll_ctypes.c_long(_LL_RESTRICT), _ll_ctypes.c_int(ruleset), _ll_ctypes.c_uint32(0)) != 0:
            raise OSError(_ll_ctypes.get_errno(), "landlock_restrict_self")
    finally:
        _ll_os.close(ruleset)
    _LL_STATE[:] = [{"abi": abi}]


def landlock_state():
    """What apply_landlock did here (inherited by the reporter and the runner), or None."""
    return dict(_LL_STATE[0]) if _LL_STATE else None


def landlock_holds():
    """True when the domain answers: listing / is refused (no rule grants it). Run by the runner
    just before the candidate, where Landlock was applied."""
    try:
        _ll_os.listdir("/")
    except PermissionError:
        return True
    return False
