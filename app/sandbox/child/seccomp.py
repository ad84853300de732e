"""Seccomp deny-list for every process of a sandbox, built with libseccomp through ctypes.

Stdlib only: this file is concatenated into the harness that runs inside the sandbox. The harness
installs it first thing (after the channel filter of child/channels.py), before it forks the
reporter and the runner (``arm_seccomp_first``), so no process of the sandbox (the bubblewrap
tier's pid 1 included) ever runs without it; the runner checks with the kernel that it is in
force immediately before candidate code runs. Nothing the
warm-up of numpy or JAX needs is on the list."""
# ruff: noqa: F821 - install_channel_filter() and apply_landlock() come from child/channels.py and
# child/landlock.py, earlier parts of the program

import ctypes
import ctypes.util
import errno as _errno

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7

# Calls a grading job never needs and that widen the kernel attack surface or let a process
# reach outside its sandbox: tracing, namespaces, mounts, keyrings, BPF, io_uring, modules,
# clock and system administration. Sockets of every family are denied: a candidate has no
# reason to talk to anything, and the plain tier shares the host's network.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "vhangup",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init",
    "clock_settime", "settimeofday", "adjtimex", "clock_adjtime", "ioperm", "iopl",
    "socket", "socketpair",
)
# clone() with any namespace flag; clone3 hides its flags in memory, so it is refused with
# ENOSYS and libc falls back to clone().
_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


_LOADED: list = []  # the loaded library, once


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _act_errno(code):
    return 0x00050000 | (code & 0xFFFF)


def load_libseccomp():
    """The libseccomp handle, or None when the library is absent."""
    # The usual soname first: find_library runs ldconfig in a subprocess, which costs a child
    # start-up time for nothing on most hosts.
    if _LOADED:  # a fork of the fork server inherits the handle its zygote loaded
        return _LOADED[0]
    lib = None
    for find in (lambda: "libseccomp.so.2", lambda: ctypes.util.find_library("seccomp")):
        name = find()
        try:
            lib = ctypes.CDLL(name, use_errno=True) if name else None
        except OSError:
            continue
        if lib is not None:
            break
    if lib is None:
        return None
    _LOADED.append(lib)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def _build_filter(lib):
    """A libseccomp context holding the deny-list (the caller releases it)."""
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        for name in DENIED_SYSCALLS:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not on this architecture
                continue
            rc = lib.seccomp_rule_add_array(ctx, _act_errno(_errno.EPERM), nr, 0, None)
            if rc < 0:
                raise OSError(-rc, f"seccomp rule for {name}")
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0:
            lib.seccomp_rule_add_array(ctx, _act_errno(_errno.ENOSYS), clone3, 0, None)
        clone = lib.seccomp_syscall_resolve_name(b"clone")
        for bit in range(17, 31):
            flag = 1 << bit
            if flag & _NAMESPACE_FLAGS:
                cmp = (_ArgCmp * 1)(_ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
                rc = lib.seccomp_rule_add_array(ctx, _act_errno(_errno.EPERM), clone, 1, cmp)
                if rc < 0:
                    raise OSError(-rc, "seccomp rule for clone")
    except BaseException:
        lib.seccomp_release(ctx)
        raise
    return ctx


def install_seccomp(lib):
    """Load the deny-list into the calling process (and its future children). Raises OSError
    if the kernel refuses it; the harness then stops before any candidate code runs."""
    ctx = _build_filter(lib)
    try:
        rc = lib.seccomp_load(ctx)  # also sets no_new_privs
        if rc < 0:
            raise OSError(-rc, "seccomp_load failed")
    finally:
        lib.seccomp_release(ctx)


_COMPILED: list = []  # the deny-list as the kernel's BPF program, once (fork server)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def compile_seccomp(lib):
    """The fork server compiles the deny-list once, to exactly the BPF program seccomp_load
    would hand the kernel (seccomp_export_bpf); each fork then loads that program
    (install_compiled) instead of building the filter again, which costs milliseconds of every
    case's CPU."""
    import os

    ctx = _build_filter(lib)
    read_end, write_end = os.pipe()
    try:
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        rc = lib.seccomp_export_bpf(ctx, write_end)
        if rc < 0:
            raise OSError(-rc, "seccomp_export_bpf failed")
        os.close(write_end)
        write_end = -1
        program = b""
        while chunk := os.read(read_end, 1 << 16):
            program += chunk
    finally:
        lib.seccomp_release(ctx)
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    if not program or len(program) % 8:  # struct sock_filter is 8 bytes
        raise OSError("seccomp_export_bpf gave no program")
    _COMPILED[:] = [ctypes.create_string_buffer(program, len(program))]


def install_compiled():
    """Load the program compile_seccomp made, as seccomp_load does: no_new_privs, then the
    filter (PR_SET_SECCOMP, SECCOMP_MODE_FILTER)."""
    libc = ctypes.CDLL(None, use_errno=True)
    program = _COMPILED[0]
    fprog = _SockFprog(len(program) // 8, ctypes.cast(program, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "the kernel refused the seccomp filter")


def seccomp_in_force():
    """True when the deny-list answers on the calling thread: a filter is in force
    (PR_GET_SECCOMP is 2) and unshare(0), a no-op the list refuses, fails with EPERM. (The
    channel filter alone, in every tier, would satisfy the first check.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(21, 0, 0, 0, 0) != 2:
        return False
    ctypes.set_errno(0)
    return libc.unshare(0) == -1 and ctypes.get_errno() == _errno.EPERM


def arm_seccomp_first():
    """Install the channel filter (always), the deny-list (when asked) and the plain tier's
    Landlock rules (when given) in the process the parent started, before the harness forks: the
    reporter (the sandbox's pid 1 in the bubblewrap tier), the runner and everything they start
    inherit them. Stops the child if one cannot be installed (the probe then refuses the tier);
    Landlock only where the kernel offers it or the configuration requires it."""
    import json
    import os
    import sys

    cfg = json.loads(sys.argv[1])
    try:
        # Every tier, with the deny-list or without it: no channel between concurrent cases
        # (child/channels.py).
        install_channel_filter()
        if cfg.get("seccomp"):
            if _COMPILED:  # a fork of the fork server
                install_compiled()
            else:
                lib = load_libseccomp()
                if lib is None:
                    raise OSError("libseccomp is not available")
                install_seccomp(lib)
        # The plain tier: what the case may open on the host (child/landlock.py), once
        # no_new_privs is set and libseccomp is loaded; neither filter refuses Landlock's calls.
        if cfg.get("landlock") is not None:
            apply_landlock(cfg["landlock"])
    except OSError as exc:
        os.write(2, f"harness set-up failed: {exc!r}\n".encode())
        os._exit(70)
