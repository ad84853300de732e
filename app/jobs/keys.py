"""Redis key names shared by the API and the workers."""

PREFIX = "sg"


def idempotency(tenant: str, job_id: str) -> str:
    return f"{PREFIX}:idem:{tenant}:{job_id}"


def result(job_id: str) -> str:
    return f"{PREFIX}:result:{job_id}"


def attempts(job_id: str) -> str:
    return f"{PREFIX}:attempts:{job_id}"


def owner(job_id: str) -> str:
    return f"{PREFIX}:owner:{job_id}"


def in_flight(tenant: str) -> str:
    return f"{PREFIX}:inflight:{tenant}"


def rq_job(job_id: str) -> str:
    """RQ's own hash for a job (its status field is read while waiting)."""
    return f"rq:job:{job_id}"
