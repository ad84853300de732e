"""Turn what the sandbox observed for one hidden case into a verdict. Only the parent holds the
expected value; the child's message is data to check, never a verdict in itself.

Reasons go back to the client, so they never carry anything derived from a hidden case: not the
size of an error (which would give the expected value away in one query), not an exception's
message or the candidate's output (which could print the inputs)."""

from __future__ import annotations

import builtins
import math
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.sandbox import CaseRun
    from app.tasks.impl.spec import Case

# passed, then the ways to fail that the candidate caused, then the sandbox's own failure.
VERDICTS = ("passed", "wrong", "exception", "timeout", "memory", "output_limit", "crashed", "sandbox_fault")


@dataclass(frozen=True)
class Returned:
    """A decoded array the candidate returned (numpy or jax)."""

    shape: tuple[int, ...]
    data: Any
    sharding: dict[str, Any] | None


class Unsupported:
    def __init__(self, what: str) -> None:
        self.what = what


# Names the candidate controls (exception classes, the types of returned objects) may be built
# from the hidden inputs (``type(repr(args), (Exception,), {})``): only well-known names are shown.
_KNOWN_NAMES = frozenset(
    {n for n, v in vars(builtins).items() if isinstance(v, type)}
    | {"function", "generator", "coroutine", "method", "builtin_function_or_method", "module", "NoneType"}
)
_KNOWN_UNSUPPORTED = re.compile(r"(?:int too large|malformed (?:dict|array)|unhashable dict key|object"
                                r"|array of [a-z]+[0-9]*)\Z")


def known_name(name: Any, fallback: str) -> str:
    return name if isinstance(name, str) and name in _KNOWN_NAMES else fallback


def decode(value: Any) -> Any:
    """The harness's tagged JSON back into plain values; anything malformed is Unsupported."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"$dict"} and isinstance(value["$dict"], list):
            out: dict[Any, Any] = {}
            for pair in value["$dict"]:
                if not (isinstance(pair, list) and len(pair) == 2):
                    return Unsupported("malformed dict")
                key = decode(pair[0])
                if not isinstance(key, str | int | float | bool | type(None)):
                    return Unsupported("unhashable dict key")
                out[key] = decode(pair[1])
            return out
        if set(value) == {"$array"} and isinstance(value["$array"], dict):
            a = value["$array"]
            shape = a.get("shape")
            if not (isinstance(shape, list) and all(isinstance(n, int) for n in shape)):
                return Unsupported("malformed array")
            sharding = a.get("sharding")
            return Returned(tuple(shape), a.get("data"), sharding if isinstance(sharding, dict) else None)
        return Unsupported(str(value.get("$unsupported", "object"))[:100])
    return value


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def compare(expected: Any, got: Any, rtol: float) -> str | None:
    """None when got matches expected, else a short reason that reveals nothing of expected."""
    if isinstance(got, Unsupported):
        what = got.what if _KNOWN_UNSUPPORTED.match(got.what) else known_name(got.what, "a type of its own")
        return f"returned an unsupported value ({what})"
    if isinstance(got, Returned) and isinstance(expected, list):
        got = got.data
    if isinstance(expected, bool):
        return None if got is expected else "wrong truth value"
    if _number(expected):
        if not _number(got):
            return f"expected a number, got {type(got).__name__}"
        if not math.isfinite(got):
            return "not a finite number"
        err = abs(got - expected) / abs(expected) if expected else abs(got)
        return None if err <= rtol else "wrong value"
    if isinstance(expected, str) or expected is None:
        return None if got == expected and type(got) is type(expected) else "wrong value"
    if isinstance(expected, list):
        if not isinstance(got, list):
            return f"expected a list, got {type(got).__name__}"
        if len(got) != len(expected):
            return "wrong length"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            why = compare(e, g, rtol)
            if why:
                return f"[{i}]: {why}"
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"expected a dict, got {type(got).__name__}"
        if set(got) != set(expected):
            return "wrong keys"
        for k in expected:
            why = compare(expected[k], got[k], rtol)
            if why:
                return f"{k}: {why}"
        return None
    raise TypeError(f"cannot compare against {type(expected).__name__}")


def check_sharding(required: dict[str, Any], got: Any) -> str | None:
    if not isinstance(got, Returned) or got.sharding is None:
        return "did not return a jax.Array"
    for key, want in required.items():
        have = got.sharding.get(key)
        if have != want:  # what it has is candidate-made: not repeated back
            return f"sharding {key} is not as asked"
    return None


def judge_case(case: Case, run: CaseRun, rtol: float, cpu_limit: float) -> dict[str, Any]:
    verdict, reason = _judge(case, run, rtol, cpu_limit)
    return {"verdict": verdict, "reason": reason, "wall_ms": round(run.wall_seconds * 1000, 1)}


def _judge(case: Case, run: CaseRun, rtol: float, cpu_limit: float) -> tuple[str, str]:
    if run.status == "sandbox_fault":
        return "sandbox_fault", run.fault or "the sandbox failed"
    if run.status == "timeout":
        return "timeout", "wall-clock limit reached"
    if run.status == "output_limit":
        return "output_limit", "printed more than the output limit"
    if run.status == "crashed" or run.final is None:
        return "crashed", "the sandboxed process vanished without a result"
    final = run.final
    candidate_cpu = float(final.get("cpu_seconds") or 0) - float((run.armed or {}).get("cpu_at_arm") or 0)
    sig = final.get("signal")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and candidate_cpu >= cpu_limit * 0.95):
        return "timeout", f"CPU limit reached ({candidate_cpu:.1f} s)"
    result = final.get("result")
    if final.get("protocol_error"):
        return "crashed", f"invalid result channel traffic: {final['protocol_error']}"
    if result is None:
        how = f"signal {sig}" if sig else f"exit code {final.get('exit_code')}"
        return "crashed", f"the process ended ({how}) without returning"
    kind = result.get("kind")
    if kind == "oversize":
        return "output_limit", "the returned value is larger than the result limit"
    if kind == "raised":
        name = result.get("type")
        if name == "MemoryError":
            return "memory", "ran out of memory (address-space limit)"
        if case.raises is not None and name == case.raises:
            return "passed", f"raised {name} as required"
        return "exception", f"raised {known_name(name, 'an exception class of its own')}"
    if case.raises is not None:
        return "wrong", f"returned a value instead of raising {case.raises}"
    try:
        got = decode(result.get("value"))
        why = compare(case.expected, got, rtol)
        if why is None and case.sharding is not None:
            why = check_sharding(case.sharding, got)
    except (OverflowError, RecursionError):
        # The candidate can write its own result frame: an integer beyond float range or absurd
        # nesting must be a wrong answer, not a grader fault that leaves the item unscored.
        why = "returned a value too large or too deeply nested to compare"
    return ("passed", "matches") if why is None else ("wrong", why)
