"""Refusals shared by the HTTP layer, the grading service and the job backends."""

from __future__ import annotations


class ApiError(Exception):
    """A request the service refuses, with the HTTP status and a short reason."""

    def __init__(self, status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers


class JobPending(Exception):
    """Queued work did not finish within the request's wait: the caller gets a job id to poll."""

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(job_id)
        self.job_id, self.status = job_id, status


class QueueUnavailable(ApiError):
    def __init__(self, why: str) -> None:
        super().__init__(503, "queue_unavailable", f"queued grading is unavailable: {why}", {"Retry-After": "5"})
