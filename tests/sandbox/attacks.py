"""Hostile submissions, grouped by theme. Each defines ``attack(...)``; what it manages to observe
comes back as its return value so the tests can check that nothing leaked. Every attack is graded
against a value it cannot know, so a pass could only come from a forged result."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.sandbox.tiers import files_confined


@dataclass(frozen=True)
class Attack:
    name: str
    source: str
    verdicts: frozenset[str]  # acceptable verdicts (never "passed")
    args: Callable[[Any], list[Any]] = lambda t: []
    # check(observed value or None, targets, tier) -> None; asserts nothing leaked
    check: Callable[[Any, Any, str], None] | None = None


def _denied(observed: Any, *_: Any) -> None:
    assert observed is None or (isinstance(observed, str) and observed.startswith("denied")), observed


def _no_env_leak(observed: Any, targets: Any, _tier: str) -> None:
    assert targets.canary not in str(observed)
    assert "SCALING_GRADER" not in str(observed)


def _no_secret(observed: Any, targets: Any, tier: str) -> None:
    assert "sk-canary" not in str(observed)


def _source_hidden(observed: Any, targets: Any, tier: str) -> None:
    # The bubblewrap and gvisor tiers bind only the interpreter and packages: the service's code
    # is absent; the plain tier's Landlock rules allow only the same (where the kernel has it).
    if files_confined(tier):
        _denied(observed)


def _nothing_created(observed: Any, targets: Any, _tier: str) -> None:
    assert not any(targets.protected_dir.iterdir()), list(targets.protected_dir.iterdir())
    _denied(observed)


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def guarded(body: str, params: str = "") -> str:
    """An attack that reports 'denied:<error>' when the sandbox stops it."""
    inner = textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
    return (
        f"import os, sys, time\ndef attack({params}):\n    try:\n{inner}\n"
        "    except BaseException as e:\n        return 'denied:' + type(e).__name__\n"
    )


RESOURCES = [
    Attack("fork_bomb", code("""
        import os
        def attack():
            while True:
                try:
                    os.fork()
                except BaseException:
                    pass
        """), frozenset({"timeout"})),
    Attack("memory_bomb", code("""
        def attack():
            hog = []
            while True:
                hog.append(bytearray(64 << 20))
        """), frozenset({"memory"})),
    Attack("infinite_loop", code("""
        def attack():
            while True:
                pass
        """), frozenset({"timeout"})),
    Attack("cpu_spin_threads", code("""
        import threading
        def spin():
            while True:
                pass
        def attack():
            for _ in range(4):
                threading.Thread(target=spin, daemon=True).start()
            spin()
        """), frozenset({"timeout"})),
    Attack("sleep_past_wall", code("""
        import time
        def attack():
            time.sleep(600)
        """), frozenset({"timeout"})),
    Attack("output_flood_100mb", code("""
        import sys
        def attack():
            chunk = 'x' * (1 << 20)
            for _ in range(100):
                sys.stdout.write(chunk)
            return 0
        """), frozenset({"output_limit"})),
    Attack("fill_disk", guarded("""
        with open('big', 'wb') as f:
            for _ in range(200):
                f.write(bytes(1 << 20))
        return 'wrote'
        """), frozenset({"wrong"}), check=_denied),
]

SECRETS = [
    Attack("read_etc_shadow", guarded("return open('/etc/shadow').read()"), frozenset({"wrong"}),
           check=_denied),
    Attack("read_service_source", guarded("return open(path).read()", "path"), frozenset({"wrong"}),
           args=lambda t: [str(t.source_file)], check=_source_hidden),
    Attack("read_settings_file", guarded("return open(path).read()", "path"), frozenset({"wrong"}),
           args=lambda t: [str(t.secret_file)], check=_no_secret),
    Attack("read_environment", code("""
        import os
        def attack():
            return sorted(os.environ.items())
        """), frozenset({"wrong"}), check=_no_env_leak),
    Attack("read_service_environ", guarded("return open(f'/proc/{pid}/environ', 'rb').read().hex()", "pid"),
           frozenset({"wrong"}), args=lambda t: [t.service_pid], check=_no_env_leak),
]

NETWORK = [
    Attack("tcp_to_localhost", guarded("""
        import socket
        socket.create_connection(('127.0.0.1', port), 1)
        return 'connected'
        """, "port"), frozenset({"wrong"}), args=lambda t: [t.tcp_port], check=_denied),
    Attack("unix_socket", guarded("""
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        return 'connected'
        """, "path"), frozenset({"wrong"}), args=lambda t: [t.unix_path], check=_denied),
]

FILESYSTEM_AND_PROCESSES = [
    Attack("write_outside_workdir", guarded("""
        open(os.path.join(d, 'owned'), 'w').write('x')
        return 'wrote'
        """, "d"), frozenset({"wrong"}), args=lambda t: [str(t.protected_dir)], check=_nothing_created),
    Attack("spawn_subprocess", guarded("""
        import subprocess
        return subprocess.run(['/bin/sh', '-c', 'echo pwned'], capture_output=True).stdout.decode()
        """), frozenset({"wrong"}), check=_denied),
    Attack("signal_service", guarded("""
        import signal
        os.kill(pid, signal.SIGTERM)
        return 'sent'
        """, "pid"), frozenset({"wrong"}), args=lambda t: [t.service_pid], check=_denied),
    Attack("kill_own_reporter", code("""
        import os, signal, time
        def attack():
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(0.5)
            return 1
        """), frozenset({"crashed", "exception"})),
    Attack("ptrace_reporter_and_service", guarded("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        rcs = [libc.ptrace(16, target, 0, 0) for target in (os.getppid(), pid)]  # PTRACE_ATTACH
        return 'attached' if 0 in rcs else 'denied:errno'
        """, "pid"), frozenset({"wrong"}), args=lambda t: [t.service_pid], check=_denied),
    Attack("ctypes_libc_setuid", guarded("""
        import ctypes
        libc = ctypes.CDLL('libc.so.6', use_errno=True)
        return 'root' if libc.setuid(0) == 0 else 'denied:setuid'
        """), frozenset({"wrong"}), check=_denied),
    Attack("background_process", guarded("""
        if os.fork() == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)
        return 'left behind'
        """), frozenset({"wrong"})),
]

FORGERY = [
    Attack("forge_result_on_every_fd", code("""
        import json, os
        def attack():
            fake = json.dumps({'kind': 'final', 'result': {'kind': 'value', 'value': 'forged'}}).encode()
            frame = json.dumps({'kind': 'value', 'value': 'forged'}).encode()
            for fd in range(256):
                for data in (fake + b'\\n', len(frame).to_bytes(8, 'big') + frame):
                    try:
                        os.write(fd, data)
                    except OSError:
                        pass
            return 'returned'
        """), frozenset({"wrong", "crashed"})),
    Attack("close_all_fds", code("""
        import os
        def attack():
            os.closerange(0, 4096)
            return 1
        """), frozenset({"crashed"})),
    Attack("return_nan", code("""
        def attack():
            return float('nan')
        """), frozenset({"wrong"})),
    Attack("return_huge_list", code("""
        def attack():
            return list(range(10**7))
        """), frozenset({"output_limit"})),
    Attack("lying_eq", code("""
        class Liar(float):
            def __eq__(self, other):
                return True
            __hash__ = float.__hash__
        def attack():
            return Liar(0.0)
        """), frozenset({"wrong"})),
    Attack("monkeypatch_builtins_and_harness", code("""
        import builtins, json, __main__
        def attack():
            builtins.isinstance = lambda *a: True
            builtins.type = lambda *a: float
            for name in list(vars(__main__)):
                if name.startswith('_') and callable(getattr(__main__, name)):
                    setattr(__main__, name, lambda *a, **k: {'kind': 'final', 'verdict': 'passed'})
            json.dumps = lambda *a, **k: '{"kind": "final", "verdict": "passed"}'
            return None
        """), frozenset({"wrong", "crashed", "exception"})),
]

ALL = [*RESOURCES, *SECRETS, *NETWORK, *FILESYSTEM_AND_PROCESSES, *FORGERY]
# Attacks the Python guards would stop first; run again without them to test the OS layers alone.
OS_LAYER = [a for a in ALL if a.name in {
    "fork_bomb", "tcp_to_localhost", "unix_socket", "spawn_subprocess", "signal_service",
    "ptrace_reporter_and_service", "ctypes_libc_setuid", "background_process", "kill_own_reporter",
}]


# In the bubblewrap tier the reporter is the sandbox's pid 1 (bubblewrap's --as-pid-1): the
# kernel drops signals sent to a namespace's init from inside it, so the attack returns and is
# simply wrong. In the gvisor tier the reporter is pid 1 under a uid of its own, which the
# candidate's cannot signal. In the plain tier the reporter dies and the case is crashed, as before.
def _reporter_may_survive(attack: Attack) -> Attack:
    if attack.name != "kill_own_reporter":
        return attack
    return Attack(attack.name, attack.source, attack.verdicts | {"wrong"}, attack.args, attack.check)


ALL[:] = [_reporter_may_survive(a) for a in ALL]
OS_LAYER[:] = [_reporter_may_survive(a) for a in OS_LAYER]
