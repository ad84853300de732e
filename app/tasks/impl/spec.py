"""What an implementation exercise is: a prompt with the function's signature and conventions,
and a generator of hidden cases whose expected values are computed here, in the parent, by the
reference solution. Each grade draws its own cases from a seed (app/graders/impl_cases.py);
cases never leave the service, only their inputs are sent to a sandbox child."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Case:
    args: tuple[Any, ...]
    expected: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    raises: str | None = None  # name of the exception the function must raise instead
    sharding: dict[str, Any] | None = None  # required properties of a returned jax.Array
    # An edge case (a degenerate input, or one that must raise) earns credit only in proportion
    # to the general cases passed: on its own it says nothing about the work.
    edge: bool = False


@dataclass(frozen=True)
class Exercise:
    name: str
    title: str
    chapter: str
    tags: tuple[str, ...]
    entry: str
    signature: str
    statement: str
    generate: Callable[[random.Random], list[Case]]
    profile: str = "numpy"  # warm-pool profile: "jax" when the exercise needs JAX
    rtol: float = 1e-6

    @property
    def task_id(self) -> str:
        return f"impl/{self.name}"

    def hidden_cases(self, seed: int) -> list[Case]:
        """The cases one seed draws (the same on every call and machine for that seed)."""
        return self.generate(random.Random(seed))

    @cached_property
    def case_count(self) -> int:
        """How many cases every draw has (the structure is fixed; only the values vary)."""
        return len(self.hidden_cases(0))

    def prompt(self) -> str:
        return (
            f"{self.title}\n\n{self.statement.strip()}\n\n"
            f"Write this function in Python:\n\n```python\n{self.signature.strip()}\n```\n\n"
            "Answer with one ```python code block defining it (imports inside the block). It is run "
            "against hidden cases in a sandbox without network or file access; your code's return "
            f"value is compared at a relative tolerance of {self.rtol:g}."
        )


def array(data: list[Any], dtype: str = "float32") -> dict[str, Any]:
    """An input array as sent to the child, where it becomes a numpy array."""
    shape: list[int] = []
    probe: Any = data
    while isinstance(probe, list):
        shape.append(len(probe))
        probe = probe[0] if probe else None
    return {"$array": {"dtype": dtype, "shape": shape, "data": data}}



def distinct(rng: random.Random, make: Callable[[random.Random, int], Case], n: int) -> list[Case]:
    """n general cases from make(rng, i), redrawing any whose expected value repeats an earlier
    one: with pairwise distinct answers, a constant can match at most one general case."""
    cases: list[Case] = []
    seen: set[str] = set()
    for i in range(n):
        for _attempt in range(100):
            case = make(rng, i)
            key = json.dumps(case.expected, sort_keys=True)
            if key not in seen:
                break
        seen.add(key)
        cases.append(case)
    return cases
