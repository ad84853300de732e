"""An RQ worker's command channel (RQ's pub/sub thread for ``rq`` commands such as a shutdown),
left without stalling the worker's stop."""

from __future__ import annotations

import contextlib
from typing import Any

from app.redis_link import REDIS_ERRORS


class PromptUnsubscribe:
    """RQ's ``unsubscribe``, in an order that cannot stall a stop (a mixin for RQ worker classes).

    RQ sends UNSUBSCRIBE and then stops its command thread, and redis-py's ``stop()`` waits for
    that thread to end, without a bound. A thread that read UNSUBSCRIBE's reply before ``stop()``
    was called went back to wait for a subscription, for RQ's sleep time of 60 s: an idle lane's
    warm stop took a minute (not ended 60 s after SIGTERM, under load), and a job kept for 60 s
    expired while its worker was still leaving. Here the thread is told to end first, so the
    reply that wakes it is its last."""

    pubsub: Any
    pubsub_thread: Any

    def unsubscribe(self) -> None:
        thread = self.pubsub_thread
        if thread is None:
            return
        thread.stop(timeout=0)  # trips its flag; waits for nothing
        with contextlib.suppress(*REDIS_ERRORS):  # Redis gone: the closed connection unsubscribes
            self.pubsub.unsubscribe()
        thread.join(timeout=1)  # as RQ's own: a thread stuck in a read is a daemon
        self.pubsub.close()
