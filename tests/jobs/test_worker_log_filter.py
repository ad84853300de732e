"""The worker's log keeps RQ's job lines and drops its maintenance lines (maintenance runs every
few seconds per lane here; one line per pass per queue would bury everything else)."""

from __future__ import annotations

import logging

from worker.lane import QuietMaintenance as _QuietMaintenance


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("rq.worker", logging.INFO, __file__, 1, msg, ("w", "impl"), None)


def test_maintenance_lines_of_rq_are_dropped_and_job_lines_kept() -> None:
    quiet = _QuietMaintenance()
    assert not quiet.filter(_record("Worker %s: cleaning registries for queue: %s"))
    assert not quiet.filter(_record("Worker %s: cleaning group registries"))
    assert quiet.filter(_record("%s: %s (%s)"))  # RQ's "queue: job started" line
    assert quiet.filter(_record("Worker %s: stopping on request"))
