"""Where parsed banks are kept between processes. A small interface so that a Redis-backed
cache (shared by API replicas) can replace or sit in front of the disk one without touching the
bank code. Payloads are opaque bytes; keys already name the exact source, parser and annotations,
so an entry never needs invalidating, only replacing."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol, cast

import redis

log = logging.getLogger(__name__)

_KEY = re.compile(r"[A-Za-z0-9._-]{1,200}")


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file and a rename, so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BankCache(Protocol):
    def get(self, key: str) -> bytes | None:
        """The payload stored under key, or None."""
        ...

    def put(self, key: str, payload: bytes) -> None:
        """Store payload under key. Failing to store is not an error for the caller."""
        ...


class DiskBankCache:
    """One file per key in a directory; writes are atomic (temporary file, then rename)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"bad cache key {key!r}")
        return self.root / f"{key}.json"

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("bank cache: cannot read %s: %s", key, exc)
            return None

    def put(self, key: str, payload: bytes) -> None:
        try:
            atomic_write(self._path(key), payload)
        except OSError as exc:  # a read-only cache directory costs a re-parse, not the service
            log.warning("bank cache: cannot write %s: %s", key, exc)


class RedisBankCache:
    """Parsed banks in Redis, shared by every API replica and worker: one parse per source,
    parser and annotations version for the whole deployment. Redis failures degrade to a miss."""

    PREFIX = "sg:bank:"

    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)

    def get(self, key: str) -> bytes | None:
        try:
            return cast("bytes | None", self._redis.get(self.PREFIX + key))  # no decode_responses: bytes
        except Exception as exc:  # redis-py raises several families; any of them is a miss here
            log.warning("bank cache: Redis unavailable for %s: %s", key, type(exc).__name__)
            return None

    def put(self, key: str, payload: bytes) -> None:
        try:
            self._redis.set(self.PREFIX + key, payload)
        except Exception as exc:
            log.warning("bank cache: cannot store %s in Redis: %s", key, type(exc).__name__)


class LayeredBankCache:
    """Look in each cache in order; fill the faster ones from a slower hit; store in all."""

    def __init__(self, *layers: BankCache) -> None:
        self.layers = layers

    def get(self, key: str) -> bytes | None:
        for i, layer in enumerate(self.layers):
            payload = layer.get(key)
            if payload is not None:
                for faster in self.layers[:i]:
                    faster.put(key, payload)
                return payload
        return None

    def put(self, key: str, payload: bytes) -> None:
        for layer in self.layers:
            layer.put(key, payload)
