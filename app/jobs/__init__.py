"""Queued grading: job ids, idempotency, results with a TTL. Two backends with one interface:
threads in-process (the embedded default) and RQ on Redis (many API replicas, many workers)."""
