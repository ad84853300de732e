"""Small formulas shared by several reference solutions."""

from __future__ import annotations

import math
from fractions import Fraction

from app.tasks.tasks.conventions import Conventions


def matmul_flops(c: Conventions, m: int, k: int, n: int) -> Fraction:
    return Fraction(c.flops_per_mac * m * k * n)


def matmul_bytes(m: int, k: int, n: int, *, lhs: Fraction, rhs: Fraction, out: Fraction) -> Fraction:
    """HBM traffic of [m, k] @ [k, n]: both inputs read once, the output written once."""
    return lhs * m * k + rhs * k * n + out * m * n


def bound(intensity: Fraction, ridge: Fraction, other: str = "memory") -> str:
    return "compute" if intensity >= ridge else other


def ceil_int(x: Fraction) -> int:
    return math.ceil(x)


def floor_int(x: Fraction) -> int:
    return math.floor(x)


def attention_params(d: int, n: int, k: int, h: int) -> int:
    return 2 * d * n * h + 2 * d * k * h


def mlp_params(d: int, f: int) -> int:
    return 3 * d * f


def all_gather_time(c: Conventions, n: int, v: Fraction, w: Fraction) -> Fraction:
    """Ring all-gather (or reduce-scatter) of a full array of v bytes at w bytes/s per chip."""
    return c.ring(n) * v / w


def all_reduce_time(c: Conventions, n: int, v: Fraction, w: Fraction) -> Fraction:
    return 2 * all_gather_time(c, n, v, w)
