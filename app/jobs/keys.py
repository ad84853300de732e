"""Redis key names shared by the API and the workers."""

PREFIX = "sg"


def idempotency(tenant: str, job_id: str) -> str:
    """A request's digest as claims made before the owner record held it (``owner``) stored it:
    read only for such claims, deleted with them."""
    return f"{PREFIX}:idem:{tenant}:{job_id}"


def result(job_id: str) -> str:
    return f"{PREFIX}:result:{job_id}"


def attempts(job_id: str) -> str:
    return f"{PREFIX}:attempts:{job_id}"


def owner(job_id: str) -> str:
    """The job's owner record: ``tenant\ndigest`` (the request's digest for an idempotency key,
    empty otherwise)."""
    return f"{PREFIX}:owner:{job_id}"


def requeue(job_id: str) -> str:
    """Held (SET NX EX) by the one retry that re-queues a claimed job found never queued."""
    return f"{PREFIX}:requeue:{job_id}"


def in_flight(tenant: str) -> str:
    return f"{PREFIX}:inflight:{tenant}"


def rq_job(job_id: str) -> str:
    """RQ's own hash for a job (its status field is read while waiting)."""
    return f"rq:job:{job_id}"


def lease(job_id: str) -> str:
    """Which attempt of a job holds it now (a token per attempt, with a TTL the holder renews)."""
    return f"{PREFIX}:lease:{job_id}"


# Channel on which a written result's job id is announced: waiting API requests are woken by it
# instead of polling.
RESULTS_CHANNEL = f"{PREFIX}:results"
# Held (SET NX EX) by the one worker lane of the deployment that runs the queues' maintenance.
MAINTENANCE = f"{PREFIX}:maintenance"
# held for a minute by the lane that last ran the minute's pass (worker.grading_worker): the look for
# jobs stranded between a lane's take and its start, and RQ's whole pass when that is due
MINUTE_MAINTENANCE = f"{PREFIX}:maintenance:minute"
# held for five minutes by the lane that last ran RQ's whole maintenance pass of its registries
REGISTRY_MAINTENANCE = f"{PREFIX}:maintenance:registries"
