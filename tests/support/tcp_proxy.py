"""A loopback TCP proxy a test controls, to cut one client off from a server (a partition)
without touching the server: while paused it relays nothing in either direction and closes
nothing, as a network that drops packets would; resumed, it relays again."""

from __future__ import annotations

import contextlib
import select
import socket
import threading

from tests.support.server import free_port


class PausableProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._relaying = threading.Event()
        self._relaying.set()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def pause(self) -> None:
        self._relaying.clear()

    def resume(self) -> None:
        self._relaying.set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the server is down: refuse this client, keep serving the next ones
                with contextlib.suppress(OSError):
                    client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _forward(self, data: bytes, from_client: bool, to: socket.socket, state: dict) -> bool:
        """Passes data on; False ends the connection instead. Tests that strike at a moment of
        the traffic watch it here (state: the connection's own, for what they remember)."""
        to.sendall(data)
        return True

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        state: dict = {}
        try:
            while not self._closed.is_set():
                self._relaying.wait()
                ready, _, _ = select.select([a, b], [], [], 0.1)
                if not self._relaying.is_set():
                    continue  # paused while waiting: what arrived stays unread until resumed
                for source in ready:
                    data = source.recv(65536)
                    if not data or not self._forward(data, source is a, peers[source], state):
                        return
        except OSError:
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._closed.set()
        self._relaying.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


class CountingProxy(PausableProxy):
    """Relays as usual and counts how often the clients' traffic names ``marker`` (a key or a
    field: how many commands touched it, for a client whose other commands a count would mix in)."""

    def __init__(self, target_port: int, marker: bytes) -> None:
        super().__init__(target_port)
        self.marker = marker
        self.seen = 0
        self._lock = threading.Lock()

    def _forward(self, data: bytes, from_client: bool, to: socket.socket, state: dict) -> bool:
        if from_client:
            with self._lock:
                self.seen += data.count(self.marker)
        return super()._forward(data, from_client, to, state)
