"""Turn what the sandbox observed for one hidden case into a verdict. Only the parent holds the
expected value; the child's message is data to check, never a verdict in itself.

Verdicts and reasons go back to the client, so both come from closed vocabularies (the enums
below): no exception message, class name, dtype text, repr or anything else the candidate made
ever appears in them, nor the size of an error (which would give the expected value away) nor
an index or key of the hidden case. Times are reported in coarse buckets only."""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from app.graders.impl_decode import DEFAULT_MAX_ITEMS, JaxClaim, Returned, Unsupported, decode

if TYPE_CHECKING:
    from app.sandbox.executor import CaseRun
    from app.tasks.impl.spec import Case

__all__ = ["NOTHING", "VERDICTS", "CaseVerdict", "Reason", "assess", "compare", "decode", "judge_case", "time_bucket"]

# passed, then the ways to fail that the candidate caused, then the sandbox's own failure.
VERDICTS = ("passed", "wrong", "exception", "timeout", "memory", "output_limit", "crashed", "sandbox_fault")


class Reason(StrEnum):
    matches = "matches"
    raised_as_required = "raised_as_required"
    wrong_value = "wrong_value"
    wrong_type = "wrong_type"
    wrong_length = "wrong_length"
    wrong_keys = "wrong_keys"
    unsupported_value = "unsupported_value"  # not plain data, or malformed
    returned_instead_of_raising = "returned_instead_of_raising"
    raised_exception = "raised_exception"  # raised where a value (or another exception) was due
    not_a_jax_array = "not_a_jax_array"
    sharding_not_as_asked = "sharding_not_as_asked"
    wall_limit = "wall_limit"
    cpu_limit = "cpu_limit"
    memory_limit = "memory_limit"
    output_limit = "output_limit"
    result_too_large = "result_too_large"
    no_result = "no_result"  # the process ended without returning
    invalid_channel = "invalid_channel"  # result-channel traffic broke the protocol
    sandbox_fault = "sandbox_fault"


# Built-in exception names a case may require; the child reports the nearest built-in class.
_EXCEPTION_NAMES = frozenset({"ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError",
                              "ArithmeticError", "LookupError", "Exception"})
_BUCKETS = ((1.0, "under_1s"), (10.0, "under_10s"))


def time_bucket(seconds: float) -> str:
    """A case's wall time, coarse enough to carry next to nothing about its input."""
    return next((name for limit, name in _BUCKETS if seconds < limit), "10s_or_more")


NOTHING = object()  # no value came back (an exception, a time-out, a crash)


@dataclass
class CaseVerdict:
    verdict: str
    reason: Reason
    seconds: float
    got: Any = NOTHING  # the decoded value: parent-side only, never in a response

    def public(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reason": self.reason.value, "time": time_bucket(self.seconds)}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def compare(expected: Any, got: Any, rtol: float) -> Reason | None:
    """None when got matches expected, else a reason from the closed vocabulary. Iterative over
    nesting would be overkill: expected values are the parent's own and shallow."""
    if isinstance(got, Unsupported):
        return Reason.unsupported_value
    if isinstance(got, Returned | JaxClaim) and isinstance(expected, list):
        got = got.data
    if isinstance(expected, bool):
        return None if got is expected else Reason.wrong_value
    if _number(expected):
        if not _number(got):
            return Reason.wrong_type
        if not math.isfinite(got):
            return Reason.wrong_value
        err = abs(got - expected) / abs(expected) if expected else abs(got)
        return None if err <= rtol else Reason.wrong_value
    if isinstance(expected, str) or expected is None:
        return None if got == expected and type(got) is type(expected) else Reason.wrong_value
    if isinstance(expected, list):
        if not isinstance(got, list):
            return Reason.wrong_type
        if len(got) != len(expected):
            return Reason.wrong_length
        for e, g in zip(expected, got, strict=True):
            why = compare(e, g, rtol)
            if why:
                return why
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return Reason.wrong_type
        if set(got) != set(expected):
            return Reason.wrong_keys
        for k in expected:
            why = compare(expected[k], got[k], rtol)
            if why:
                return why
        return None
    raise TypeError(f"cannot compare against {type(expected).__name__}")


def judge_case(case: Case, run: CaseRun, rtol: float, cpu_limit: float,
               max_items: int = DEFAULT_MAX_ITEMS) -> dict[str, Any]:
    """The client-facing verdict of one case."""
    return assess(case, run, rtol, cpu_limit, max_items).public()


def assess(case: Case, run: CaseRun, rtol: float, cpu_limit: float,
           max_items: int = DEFAULT_MAX_ITEMS) -> CaseVerdict:
    verdict, reason, got = _judge(case, run, rtol, cpu_limit, max_items)
    return CaseVerdict(verdict, reason, run.wall_seconds, got)


def _judge(case: Case, run: CaseRun, rtol: float, cpu_limit: float, max_items: int) -> tuple[str, Reason, Any]:
    if run.status == "sandbox_fault":
        return "sandbox_fault", Reason.sandbox_fault, NOTHING
    if run.status == "timeout":
        return "timeout", Reason.wall_limit, NOTHING
    if run.status == "output_limit":
        return "output_limit", Reason.output_limit, NOTHING
    final = run.final if isinstance(run.final, dict) else None
    if run.extra.get("oom_kills"):  # the case's memory group killed a process: the case hit its limit
        return "memory", Reason.memory_limit, NOTHING
    if run.status == "crashed" or final is None:
        return "crashed", Reason.no_result, NOTHING
    armed = run.armed if isinstance(run.armed, dict) else {}
    candidate_cpu = _float(final.get("cpu_seconds")) - _float(armed.get("cpu_at_arm"))
    sig = final.get("signal")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and candidate_cpu >= cpu_limit * 0.95):
        return "timeout", Reason.cpu_limit, NOTHING
    if final.get("protocol_error"):
        return "crashed", Reason.invalid_channel, NOTHING
    result = final.get("result")
    if not isinstance(result, dict):
        return "crashed", Reason.no_result, NOTHING
    kind = result.get("kind")
    if kind == "oversize":
        return "output_limit", Reason.result_too_large, NOTHING
    if kind == "raised":
        name = result.get("type")
        if name == "MemoryError":
            return "memory", Reason.memory_limit, NOTHING
        if case.raises is not None and name == case.raises and name in _EXCEPTION_NAMES:
            return "passed", Reason.raised_as_required, NOTHING
        return "exception", Reason.raised_exception, NOTHING
    if kind == "invalid":
        return "wrong", Reason.unsupported_value, Unsupported()
    if kind != "value":
        return "crashed", Reason.invalid_channel, NOTHING
    got = decode(result.get("value"), max_items)
    if case.raises is not None:
        return "wrong", Reason.returned_instead_of_raising, got
    why = compare(case.expected, got, rtol)
    if why is None and case.sharding is not None and not isinstance(got, JaxClaim):
        why = Reason.not_a_jax_array
    return ("passed", Reason.matches, got) if why is None else ("wrong", why, got)


def _float(x: Any) -> float:
    return float(x) if _number(x) and math.isfinite(x) else 0.0
