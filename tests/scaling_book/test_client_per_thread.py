"""The trainer helpers pool one sync client per (URL, thread): httpx clients are not meant to be
shared across the threads a trainer's reward workers run in."""

from __future__ import annotations

import threading

from scaling_book.client import GraderClient
from scaling_book.grading import sync_client

URL = "http://127.0.0.1:9"  # never contacted: making a client opens no connection


def test_sync_client_is_reused_within_a_thread_and_never_shared_across_threads() -> None:
    here = sync_client(URL)
    assert sync_client(URL) is here
    seen: list[GraderClient] = []
    worker = threading.Thread(target=lambda: seen.extend([sync_client(URL), sync_client(URL)]))
    worker.start()
    worker.join()
    assert seen[0] is seen[1]
    assert seen[0] is not here
    seen[0].close()
