"""The worker container's seccomp profile (deploy/worker-seccomp.json), written as data: the system
calls the worker was measured to make, grouped by purpose, each group with why it is needed.

    python3 deploy/seccomp_worker.py          # write deploy/worker-seccomp.json
    python3 deploy/seccomp_worker.py --check  # exit 1 when the committed file differs

How the list was measured (x86_64, docs/deployment.md "The worker's seccomp profile"): the worker
container ran under a profile whose default action is SCMP_ACT_LOG, so the kernel logged every
call not yet allowed (audit records type=1326 in the kernel log); the stack tests, hostile cases,
both sandbox launchers, health checks, a warm stop, Redis restarts and network cuts ran against
it, and each call logged was added, until a full run logged none (runc's own last steps before it
starts the container's process run under the filter too, and are included). Every name below was
logged by that method, none added by guess; socket(2)'s family restriction held in the last run.

Every call not listed fails with EPERM (SCMP_ACT_ERRNO; Docker 20.10, the engine this was
measured on, ignores a profile's defaultErrnoRet, so ENOSYS for unlisted calls, which would let a
library fall back as on an older kernel, is not available everywhere and is not used). The calls in
DENIED are also named in a rule of their own: nothing in the worker makes them, each would widen
what a compromised worker could do to the host's kernel, and a test keeps them out of every group.

gVisor's own system calls: runsc runs gVisor's kernel (the Sentry) and its file proxy as host
processes of this container, under seccomp filters of their own stacked on this one, so they need
only what both allow. A case's own calls never reach this filter: with the ptrace platform the
case's threads are stopped at every call (PTRACE_SYSEMU) and the Sentry serves it; the kernel
skips seccomp for a call a tracer emulates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PATH = Path(__file__).with_name("worker-seccomp.json")

# Why each group is allowed, and its calls (x86_64 names). The first groups are what any Python
# process with threads, sockets and child processes makes; the "runsc" groups are what building a
# gVisor sandbox adds beyond that.
GROUPS: list[tuple[str, list[str]]] = [
    ("memory: the interpreters' and runsc's (Go) allocators, thread stacks, numpy/XLA arenas", [
        "brk", "madvise", "mbind", "membarrier", "mmap", "mprotect", "mremap", "munmap",
    ]),
    ("threads: Python's and Go's threads and their locks, per-thread state and CPU affinity", [
        "arch_prctl", "clone", "clone3", "exit", "futex", "gettid", "rseq", "sched_getaffinity",
        "sched_yield", "set_robust_list", "set_tid_address",
    ]),
    ("processes: sandbox children, runsc and the health check started, waited for and signalled", [
        "execve", "exit_group", "getpgrp", "getpid", "getppid", "kill", "pidfd_open",
        "pidfd_send_signal", "setpgid", "setsid", "tgkill", "vfork", "wait4", "waitid",
    ]),
    ("signals and timers: handlers, masks, the init's signal forwarding, sleeps and alarms", [
        "alarm", "clock_nanosleep", "nanosleep", "restart_syscall", "rt_sigaction", "rt_sigprocmask",
        "rt_sigreturn", "rt_sigtimedwait", "sigaltstack",
    ]),
    ("files: reading the code and cases, sandbox work directories on /tmp, runsc's bundles and logs", [
        "access", "chdir", "chmod", "close", "close_range", "copy_file_range", "dup", "dup2", "dup3",
        "faccessat", "fallocate", "fchown", "fcntl", "flock", "fstat", "fstatfs", "ftruncate",
        "getcwd", "getdents64", "ioctl", "lseek", "mkdir", "mkdirat", "newfstatat", "openat", "pread64",
        "preadv2", "pwrite64", "read", "readlink", "readlinkat", "rename", "rmdir", "statfs", "statx", "symlink",
        "umask", "unlink", "unlinkat", "utimensat", "write",
    ]),
    ("pipes and events: result channels of sandbox children, runsc's and Go's event loops", [
        "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_wait", "eventfd2", "memfd_create", "pipe2",
        "poll", "ppoll", "pselect6",
    ]),
    ("sockets: Redis, the judge, the metrics port, runsc's control socket and gVisor's file proxy"
     " (socket(2) itself only for the families in SOCKET_FAMILIES)", [
        "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen", "recvfrom",
        "recvmsg", "sendmmsg", "sendmsg", "sendto", "setsockopt", "shutdown", "socketpair",
    ]),
    ("identity and limits: the worker's uid checks, rlimits a case runs under, system facts", [
        "getegid", "geteuid", "getgid", "getrandom", "getrlimit", "getuid", "prlimit64", "setrlimit",
        "sysinfo", "uname",
    ]),
    ("runsc: building a sandbox's root (its own mount namespace, then pivot_root and chroot into it)", [
        "chroot", "mount", "pivot_root", "umount2",
    ]),
    ("runsc: dropping to gVisor's ids and capabilities, its no-new-privileges bit and own filters", [
        "capget", "capset", "prctl", "seccomp", "setgid", "setuid",
    ]),
    ("runsc: the ptrace platform, with which gVisor's kernel runs each case's threads as stubs", [
        "ptrace",
    ]),
    ("tools an operator or the stack tests run with `docker exec` (cat, sh)", [
        "fadvise64",
    ]),
]

# socket(2) is allowed for these address families only (its first argument): Unix sockets (runsc's
# control socket, gVisor's file proxy, socketpair channels) and TCP/UDP over IPv4 and IPv6 (Redis,
# the judge, DNS, the metrics port). The others (netlink, packet, AF_ALG, vsock, ...) are the
# kernel code a compromised worker would reach through socket(2); none was measured in use.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}

# unshare(2) for a new mount namespace alone (its first argument, the flags, exactly CLONE_NEWNS):
# runsc starts in a private mount namespace of the service's making, where the host files a sandbox
# reads are remounted noatime (app/sandbox/tiers/access_times.py: a case's reads no longer update
# access times a later case can read). Any other flag (a user, pid or network namespace, ...) is
# refused as before; runsc makes its sandbox's own namespaces with clone.
UNSHARE_FLAGS = {"CLONE_NEWNS": 0x00020000}

# Kept out with EPERM, whatever a future measurement logs: each needs a reason in docs/deployment.md
# before it may move into a group (a test checks the two sets stay apart).
DENIED: frozenset[str] = frozenset({
    # kernel keyrings: shared across containers on older kernels, a known escape path
    "add_key", "keyctl", "request_key",
    # eBPF programs and perf events: kernel attack surface, kernel memory and timing side channels
    "bpf", "perf_event_open",
    # loading or replacing kernel code
    "create_module", "delete_module", "finit_module", "init_module", "kexec_file_load", "kexec_load",
    # file handles: open_by_handle_at opens host files by handle, past any mount (the shocker escape)
    "name_to_handle_at", "open_by_handle_at",
    # blocking page faults from user space: widens kernel races
    "userfaultfd",
    # the host's I/O ports, swap, power, accounting, clock and quotas
    "acct", "adjtimex", "clock_adjtime", "clock_settime", "ioperm", "iopl", "quotactl", "quotactl_fd",
    "reboot", "settimeofday", "swapoff", "swapon",
    # the new mount API (runsc uses mount(2)); io_uring; other processes' memory; kernel log
    "fsconfig", "fsmount", "fsopen", "fspick", "mount_setattr", "move_mount", "open_tree",
    "io_uring_enter", "io_uring_register", "io_uring_setup",
    "kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev",
    "lookup_dcookie", "nfsservctl", "syslog", "uselib", "ustat", "vhangup", "_sysctl",
})

EPERM = 1


def allowed() -> list[str]:
    names = [name for _, group in GROUPS for name in group] + ["socket", "unshare"]
    if len(names) != len(set(names)):
        raise ValueError("a call is listed in two groups")
    return sorted(names)


def render() -> dict:
    """The profile in Docker's format (also read by Compose and Podman)."""
    allow = allowed()
    overlap = set(allow) & DENIED
    if overlap:
        raise ValueError(f"allowed and denied at once: {sorted(overlap)}")
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        # x86_64 only: the names were measured there (docs/deployment.md says what arm64 needs).
        # A 32-bit call (int 0x80) matches no architecture and is refused.
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [
            *({"names": sorted(group), "action": "SCMP_ACT_ALLOW", "comment": why} for why, group in GROUPS),
            *({"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": family,
               "op": "SCMP_CMP_EQ"}], "comment": f"socket({name}, ...)"} for name, family in SOCKET_FAMILIES.items()),
            *({"names": ["unshare"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": flags,
               "op": "SCMP_CMP_EQ"}], "comment": f"unshare({name}) alone"} for name, flags in UNSHARE_FLAGS.items()),
            {"names": sorted(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
             "comment": "kept out: nothing in the worker makes these, and each widens the host kernel's reach"},
        ],
    }


def text() -> str:
    return json.dumps(render(), indent=2) + "\n"


def stale(path: Path = PATH) -> bool:
    """Whether the file at path differs from what the generator renders."""
    return not path.exists() or path.read_text() != text()


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit("deploy/worker-seccomp.json is stale: run deploy/seccomp_worker.py" if stale() else 0)
    PATH.write_text(text())
