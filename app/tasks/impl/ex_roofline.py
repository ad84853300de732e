"""Roofline exercises: time bounds with and without overlap, matmul cost, critical batch size."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise, distinct

# Ranges wide enough that no table of inputs can cover them: every grade draws its own values.


def _roofline_case(rng: random.Random, i: int) -> Case:
    args = (
        rng.uniform(1e12, 1e16), rng.uniform(1e8, 1e12), rng.choice([0.0, rng.uniform(1e7, 1e11)]),
        rng.uniform(1e14, 3e15), rng.uniform(5e11, 1e13), rng.uniform(2e10, 4e11), i % 2 == 0,
    )
    return Case(args, ref.roofline_time(*args))


def _roofline_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _roofline_case, 8)


def _matmul_case(rng: random.Random, i: int) -> Case:
    args = (rng.randint(1, 8192), rng.randint(256, 16384), rng.randint(256, 65536), rng.choice([1, 2, 4]))
    return Case(args, ref.matmul_cost(*args))


def _matmul_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _matmul_case, 6)


def _critical_batch_case(rng: random.Random, i: int) -> Case:
    # bytes per weight cycles so that every draw has cases with and without a factor of 1
    args = (rng.uniform(1e14, 3e15), rng.uniform(5e11, 1e13), (0.5, 2, 4, 1, 2)[i])
    return Case(args, ref.critical_batch_size(*args))


def _critical_batch_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _critical_batch_case, 5)


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
