"""What one case leaves behind must not reach the next case of the same fork server, whoever's
it is: in the gvisor tier every case of a lane runs in one long-lived gVisor sandbox, in the
others every case is a fork of one zygote. Case A (one tenant's) leaves a token in every place a
process can leave state (files, environment, open descriptors, SysV and POSIX shared memory,
message queues, a process left running that signals everyone), and case B (another tenant's,
forked next by the same fork server) looks for it and must find nothing. Each check is first
shown to find the token when A and B are one process (so that a broken probe cannot pass)."""

from __future__ import annotations

import os

import pytest

from app.sandbox.pool import Sandbox
from tests.sandbox.attacks import code
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LANDLOCK, PRIVATE_TIERS, box_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# One program for both cases: plant(token) leaves the token everywhere it can; look(token) says
# where it finds it. attack(token, mode) runs plant, look, or plant then look in one process.
_RESIDUE = code('''
    import ctypes, os, signal, sys, time

    _libc = ctypes.CDLL(None, use_errno=True)
    _KEY = 0x5A17  # SysV IPC key both cases use
    _PLACES = ('/tmp', '/dev/shm', os.environ.get('HOME', '/nonexistent'), os.getcwd())

    def _seen_signals():
        seen = []
        signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
        return seen

    def plant(token):
        done = []
        for place in _PLACES:
            try:
                with open(os.path.join(place, token), 'w') as f:
                    f.write(token)
                os.chmod(os.path.join(place, token), 0o666)
                done.append(place)
            except OSError:
                pass
        os.environ['RESIDUE'] = token
        os.putenv('RESIDUE', token)
        for _ in range(4):  # descriptors without close-on-exec, the pipe's write end kept
            r, w = os.pipe()
            os.set_inheritable(r, True)
            os.set_inheritable(w, True)
            os.write(w, token.encode())
        shm = _libc.shmget(_KEY, 4096, 0o1666)  # IPC_CREAT | 0666
        if shm >= 0:
            done.append('sysv-shm')
        if _libc.semget(_KEY, 1, 0o1666) >= 0:
            done.append('sysv-sem')
        if _libc.msgget(_KEY, 0o1666) >= 0:
            done.append('sysv-msg')
        try:
            rt = ctypes.CDLL('librt.so.1', use_errno=True)
            rt.mq_open.restype = ctypes.c_int
            if rt.mq_open(('/' + token).encode(), 0o100 | 0o2, 0o666, None) >= 0:  # O_CREAT|O_RDWR
                done.append('mqueue')
        except OSError:
            pass
        pid = os.fork()  # a process left running: it signals every process it can, forever
        if pid == 0:
            os.setsid()
            if os.fork():
                os._exit(0)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            while True:
                try:
                    os.kill(-1, signal.SIGUSR1)
                except OSError:
                    pass
                time.sleep(0.01)
        os.waitpid(pid, 0)
        return done

    def look(token, seen, private):
        found = []
        for place in _PLACES:
            if os.path.exists(os.path.join(place, token)):
                found.append('file in ' + place)
        if os.environ.get('RESIDUE') == token:
            found.append('environment')
        with open('/proc/self/environ', 'rb') as f:
            if token.encode() in f.read():
                found.append('initial environment')
        for fd in range(3, 256):  # a pipe with the token waiting in it
            try:
                os.set_blocking(fd, False)
                if token.encode() in os.read(fd, 64):
                    found.append(f'fd {fd}')
            except OSError:
                pass
        for name, call in (('sysv-shm', lambda: _libc.shmget(_KEY, 0, 0)),
                           ('sysv-sem', lambda: _libc.semget(_KEY, 0, 0)),
                           ('sysv-msg', lambda: _libc.msgget(_KEY, 0))):
            if call() >= 0:
                found.append(name)
        if private:  # the plain tier shares the host's message queues (docs/sandbox.md)
            try:
                rt = ctypes.CDLL('librt.so.1', use_errno=True)
                if rt.mq_open(('/' + token).encode(), 0o2) >= 0:
                    found.append('mqueue')
            except OSError:
                pass
        time.sleep(0.3)  # long enough for a left process to have signalled many times
        if seen:
            found.append('signals')
        return found

    def attack(token, mode, private):
        seen = _seen_signals()
        if mode == 'plant':
            return plant(token)
        if mode == 'look':
            found = look(token, seen, private)
            return 'denied:clean' if not found else found
        planted = plant(token)
        return [planted, look(token, seen, private)]
    ''')


def _landlocked(tier: str) -> bool:
    return tier.startswith("plain") and LANDLOCK


def _files(planted: list[str]) -> list[str]:
    return [p for p in planted if p.startswith("/")]


def _run(box: Sandbox, tier: str, token: str, mode: str) -> object:
    run, _ = hostile(box, _RESIDUE, [token, mode, tier.startswith(PRIVATE_TIERS)])
    assert run.extra.get("launcher") == "forkserver", run.extra
    return observed(run)


def test_the_probe_finds_what_it_planted_in_one_process(fork_tier: str) -> None:
    """The oracle: within one case, look() finds the files, the environment, the pipes and the
    signals plant() left (what the sandbox allows of them)."""
    box = box_for(fork_tier, guards=False)
    token = "residue-" + os.urandom(6).hex()
    result = _run(box, fork_tier, token, "both")
    assert isinstance(result, list) and len(result) == 2, result
    planted, found = result
    assert "environment" in found and "signals" in found, (planted, found)
    if _landlocked(fork_tier):  # the host's /tmp and /dev/shm are not the case's: its own dirs only
        assert "/tmp" not in planted and "/dev/shm" not in planted and len(_files(planted)) == 2, planted
        assert len([f for f in found if f.startswith("file in ")]) == 2, found
    else:
        assert "file in /tmp" in found, (planted, found)
    assert any(f.startswith("fd ") for f in found), found


@pytest.mark.parametrize("rounds", [3])
def test_nothing_of_one_case_reaches_the_next(fork_tier: str, rounds: int) -> None:
    """Case A plants, case B (another tenant's, next from the same fork server) looks: B finds
    nothing, each of several times (so that a later case meets a lane that ran many)."""
    box = box_for(fork_tier, guards=False)
    for _ in range(rounds):
        token = "residue-" + os.urandom(6).hex()
        planted = _run(box, fork_tier, token, "plant")
        assert isinstance(planted, list) and ("/tmp" in planted or _landlocked(fork_tier)), planted
        assert _files(planted), planted
        found = _run(box, fork_tier, token, "look")
        assert found == "denied:clean", (planted, found)
