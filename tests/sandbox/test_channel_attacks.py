"""No channel between concurrent cases (docs/sandbox.md, "Nothing shared between concurrent
cases"): for each channel of channel_attacks.py, a sender case raises 0xA5 on the files every case
sees and a receiver case, running at the same time, looks for it; the receiver must see no bit.

The sandbox knows no tenants: every case gets a uid, namespaces and limits of its own, so two
cases of two different grades (as here) are exactly as far apart as two tenants' cases. First,
the same sender and receiver run as two plain host processes and must pass the byte: proof that
each channel is real and that its receiver would see it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from app.sandbox.pool import get_sandbox
from tests.sandbox.channel_attacks import BITS, BYTE, CHANNELS, SHARED_MEMORY, Channel
from tests.sandbox.isolation_support import observed
from tests.sandbox.tiers import tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

HOLD = 4.0  # how long the sender keeps the byte up
LEAD = 0.5  # the receiver starts this much later ...
WINDOW = 3.0  # ... and looks for this long
OVERLAP = 1.0  # the test counts only if both cases were running together at least this long

_CALL = "\nimport json, sys\nprint(json.dumps(attack(*json.loads(sys.argv[1]))))\n"


def _args(channel: Channel) -> tuple[list[Any], list[Any]]:
    """(sender's arguments, receiver's arguments)."""
    if channel is SHARED_MEMORY:
        name, key = "chan-" + os.urandom(6).hex(), int.from_bytes(os.urandom(3), "big") + 1000
        return [[name, key], HOLD], [[name, key, WINDOW]]
    return [BITS, HOLD], [WINDOW]


def _overlap(sent: dict[str, float], received: dict[str, float]) -> float:
    return min(sent["to"], received["to"]) - max(sent["from"], received["from"])


@pytest.mark.parametrize("channel", CHANNELS, ids=lambda c: c.name)
def test_the_channel_carries_the_byte_between_host_processes(channel: Channel) -> None:
    """The control: outside any sandbox (as root here, as the service runs) the channel works."""
    send_args, receive_args = _args(channel)
    sender = subprocess.Popen([sys.executable, "-I", "-c", channel.sender_source() + _CALL, json.dumps(send_args)],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(LEAD)
    receiver = subprocess.run([sys.executable, "-I", "-c", channel.receiver_source() + _CALL,
                               json.dumps(receive_args)], capture_output=True, text=True, timeout=30, check=True)
    sent = json.loads(sender.communicate(timeout=30)[0])
    received = json.loads(receiver.stdout)
    assert _overlap(sent, received) >= OVERLAP, (sent, received)
    got = received["got"][0] if channel.name == "proc_locks" else received["got"]
    assert got == BYTE, (sent, received)


@pytest.mark.parametrize("channel", CHANNELS, ids=lambda c: c.name)
def test_no_byte_passes_between_concurrent_cases(tier: str, channel: Channel) -> None:
    if channel.private_only and tier.startswith("plain"):
        pytest.skip("the plain tier shares the host's /dev/shm and SysV IPC (docs/sandbox.md)")
    box = get_sandbox(tier_settings(tier, guards=False, wall_seconds=12.0, cpu_seconds=6.0))
    together = []
    # A receiver whose child was not warm yet may start after the sender has finished: such a
    # pair proves nothing, and is run again (the pool is warm by then).
    for _attempt in range(3):
        sent, received = _pair(box, channel)
        got = received["got"]
        if channel.name == "proc_locks" and isinstance(got, list):
            got, shown = got
            if tier.startswith("bubblewrap"):
                assert shown == 0  # hidden: the file reads empty
        # Nothing arrived: not the byte, not one bit of it (a refused receiver is a string).
        assert not (isinstance(got, int) and got != 0), (sent, received)
        if isinstance(got, str):  # the receiver was refused its probe: it cannot listen at all
            assert got.startswith("denied:"), got
            return
        together.append(_overlap(sent, received))
        if together[-1] >= OVERLAP:
            break
    assert max(together) >= OVERLAP, together  # the two cases did run at the same time


def _pair(box: Any, channel: Channel) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the sender, and the receiver LEAD seconds later; what each returned."""
    send_args, receive_args = _args(channel)
    runs: dict[str, Any] = {}
    sender = threading.Thread(target=lambda: runs.update(
        sent=box.run(channel.sender_source(), "attack", send_args)))
    sender.start()
    try:
        time.sleep(LEAD)
        received_run = box.run(channel.receiver_source(), "attack", receive_args)
    finally:
        sender.join()
    sent, received = observed(runs["sent"]), observed(received_run)
    assert isinstance(sent, dict) and isinstance(received, dict), (runs["sent"], received_run)
    return sent, received


HONEST = """
import os, sqlite3, tempfile
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def solve(n):
    # What an honest submission may do: numpy, a jitted and sharded JAX computation, and a
    # library that locks its own temporary file (sqlite takes POSIX locks on its database).
    a = np.arange(n, dtype=np.float64)
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    x = jax.device_put(jnp.arange(n, dtype=jnp.float32), NamedSharding(mesh, P("x")))
    total = float(jax.jit(lambda v: (v * 2).sum())(x))
    path = os.path.join(tempfile.mkdtemp(), "own.db")
    with sqlite3.connect(path) as db:
        db.execute("create table t (v real)")
        db.executemany("insert into t values (?)", [(float(v),) for v in a])
        stored = db.execute("select sum(v) from t").fetchone()[0]
    return [float(a.sum()), total, stored]
"""


def test_honest_numpy_jax_and_a_locking_library_run_under_the_filter(tier: str) -> None:
    n = 16 + int.from_bytes(os.urandom(1), "big")
    box = get_sandbox(tier_settings(tier, wall_seconds=30.0, cpu_seconds=20.0))
    run = box.run(HONEST, "solve", [n], profile="jax")
    expected = float(sum(range(n)))  # the oracle: the same sums, computed here
    assert observed(run) == [expected, 2 * expected, expected], (run.status, run.final)


THREADS = """
import threading

def solve(n):
    def vm_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) >> 10
    before = vm_mib()
    started, done = threading.Barrier(n + 1), threading.Barrier(n + 1)
    held = []

    def work():
        held.append([bytearray(64) for _ in range(1000)])  # each thread's first allocations
        started.wait()
        done.wait()

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    started.wait()
    grown = vm_mib() - before
    done.wait()
    for t in threads:
        t.join()
    import sqlite3  # a library mapped after the threads: the import an honest case failed
    return [grown, sqlite3.sqlite_version_info[0]]
"""


def test_threads_of_an_honest_case_leave_its_address_space_for_its_imports(tier: str) -> None:
    """Ten threads that allocate (as JAX's backend starts its own), then an import: glibc gave each
    thread an arena of its own, 64 MiB of address space, so ten took more than the tests' 512 MiB
    beyond the warm state and the case failed (can't start a thread, or an ImportError for the
    next library; under load an honest JAX case once scored so). One arena: a thread costs its
    stack."""
    threads = 10
    run = get_sandbox(tier_settings(tier, wall_seconds=20.0, cpu_seconds=10.0)).run(THREADS, "solve", [threads])
    result = observed(run)
    assert result is not None, (run.status, run.final)
    grown, sqlite_major = result
    assert sqlite_major == 3
    assert grown < threads * 64, grown  # not an arena a thread
