"""What an implementation exercise is: a prompt with the function's signature and conventions,
and a deterministic generator of hidden cases whose expected values are computed here, in the
parent. Cases never leave the service; only their inputs are sent to a sandbox child."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Case:
    args: tuple[Any, ...]
    expected: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    raises: str | None = None  # name of the exception the function must raise instead
    sharding: dict[str, Any] | None = None  # required properties of a returned jax.Array


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

    def hidden_cases(self) -> list[Case]:
        """The same cases on every call and every machine: seeded from the exercise name."""
        seed = int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "big")
        return self.generate(random.Random(seed))

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

