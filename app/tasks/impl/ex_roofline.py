"""Roofline exercises: time bounds with and without overlap, matmul cost, critical batch size."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise

_PEAKS = [1.97e14, 4.59e14, 9.18e14, 9.89e14, 2.25e15]
_HBM = [8.2e11, 2.765e12, 3.35e12, 7.37e12, 8.0e12]


def _roofline_cases(rng: random.Random) -> list[Case]:
    cases = []
    for i in range(8):
        args = (
            rng.uniform(1e12, 1e16), rng.uniform(1e8, 1e12), rng.choice([0.0, rng.uniform(1e7, 1e11)]),
            rng.choice(_PEAKS), rng.choice(_HBM), rng.choice([4.5e10, 9e10, 1.8e11]), i % 2 == 0,
        )
        cases.append(Case(args, ref.roofline_time(*args)))
    return cases


def _matmul_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(6):
        args = (rng.choice([1, 8, 64, 512, 4096]), rng.choice([1024, 4096, 8192]),
                rng.choice([4096, 16384, 28672]), rng.choice([1, 2, 4]))
        cases.append(Case(args, ref.matmul_cost(*args)))
    return cases


def _critical_batch_cases(rng: random.Random) -> list[Case]:
    cases = []
    for peak, bw in zip(_PEAKS, _HBM, strict=True):
        args = (peak, bw, rng.choice([0.5, 1, 2, 4]))
        cases.append(Case(args, ref.critical_batch_size(*args)))
    return cases


EXERCISES = [
    Exercise(
        name="roofline_time",
        title="Roofline time of one step, with and without overlap",
        chapter="roofline",
        tags=("roofline.time-bounds", "roofline.network"),
        entry="roofline_time",
        signature="def roofline_time(flops: float, hbm_bytes: float, comm_bytes: float, peak_flops: float,\n"
        "                  hbm_bandwidth: float, comm_bandwidth: float, overlap: bool) -> float:",
        statement="""
An operation performs `flops` floating-point operations at `peak_flops` FLOPs/s, moves `hbm_bytes`
between HBM and the cores at `hbm_bandwidth` bytes/s and sends `comm_bytes` over the interconnect at
`comm_bandwidth` bytes/s. Return its run time in seconds: when `overlap` is true, compute, memory and
communication overlap perfectly (the lower bound); when false, they run one after another (the upper
bound).""",
        generate=_roofline_cases,
    ),
    Exercise(
        name="matmul_cost",
        title="FLOPs, bytes and arithmetic intensity of a matmul",
        chapter="roofline",
        tags=("roofline.matmul", "roofline.arithmetic-intensity"),
        entry="matmul_cost",
        signature="def matmul_cost(b: int, d: int, f: int, bytes_per_element: int) -> dict:",
        statement="""
For the product of an activation matrix of shape [b, d] with a weight matrix of shape [d, f], where
every element (both inputs and the [b, f] output) takes `bytes_per_element` bytes, return a dict with
`"flops"` (multiply and add counted separately), `"bytes"` (the two inputs read once from HBM and the
output written once) and `"intensity"` (FLOPs per byte).""",
        generate=_matmul_cases,
    ),
    Exercise(
        name="critical_batch_size",
        title="Critical batch size of a weight-bound matmul",
        chapter="roofline",
        tags=("roofline.matmul", "roofline.arithmetic-intensity"),
        entry="critical_batch_size",
        signature="def critical_batch_size(peak_flops: float, hbm_bandwidth: float,\n"
        "                        bytes_per_weight: float) -> int:",
        statement="""
A [B, D] x [D, F] matmul with D and F much larger than B loads its weights from HBM at
`hbm_bandwidth` bytes/s, each weight taking `bytes_per_weight` bytes; activation traffic is
negligible. The chip computes at `peak_flops`. Return the smallest integer batch size B at which the
matmul is compute-bound (its arithmetic intensity is at least the chip's).""",
        generate=_critical_batch_cases,
    ),
]
