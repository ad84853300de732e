"""A tiny counter-based generator: the draws for task (seed, index) depend on nothing else, so a
task id alone regenerates its task in any process, on any machine, in any Python version
(``random.Random`` makes no such promise across versions for every method, and seeding it per
task is slower than the whole of this)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
T = TypeVar("T")


class Draws:
    """SplitMix64 over a state derived from (seed, index)."""

    __slots__ = ("_state",)

    def __init__(self, seed: int, index: int) -> None:
        self._state = (seed * 0xD1B54A32D192ED03 + index * _GOLDEN + 0x632BE59BD9B4E019) & _MASK

    def next(self) -> int:
        self._state = z = (self._state + _GOLDEN) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.next() % len(options)]

    def integer(self, low: int, high: int) -> int:
        """Uniform in [low, high]."""
        return low + self.next() % (high - low + 1)

    def multiple(self, low: int, high: int, step: int) -> int:
        """A multiple of step in [low, high]."""
        return step * self.integer(-(-low // step), high // step)

    def coin(self) -> bool:
        return bool(self.next() & 1)
