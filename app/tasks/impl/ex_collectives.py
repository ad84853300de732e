"""Collectives on one ring axis and the TPU torus topology."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise


def _ring_cases(rng: random.Random) -> list[Case]:
    cases = []
    for kind in ("all_gather", "reduce_scatter", "all_reduce", "all_reduce", "all_gather"):
        args = (kind, rng.choice([2**20, 2**27, 3 * 2**30]), rng.choice([4, 8, 16]),
                rng.choice([4.5e10, 9e10]), rng.random() < 0.5)
        cases.append(Case(args, ref.ring_collective_time(*args)))
    cases.append(Case(("all_reduce", 2**20, 1, 4.5e10, True), 0.0))
    cases.append(Case(("all_to_all", 2**20, 8, 4.5e10, True), raises="ValueError"))
    return cases


def _shape(rng: random.Random) -> list[int]:
    return [rng.choice([1, 2, 4, 8, 16]) for _ in range(rng.choice([2, 3]))]


def _neighbor_cases(rng: random.Random) -> list[Case]:
    cases = []
    for i in range(7):
        shape = _shape(rng) if i else [4, 4, 4]
        coord = [rng.randrange(n) for n in shape]
        if i == 0:
            coord = [0, 3, 0]
        args = (shape, coord, i % 3 != 2)
        cases.append(Case(args, ref.torus_neighbors(*args)))
    cases.append(Case(([4, 4], [4, 0], True), raises="ValueError"))
    return cases


def _stats_cases(rng: random.Random) -> list[Case]:
    cases = []
    for i in range(7):
        args = (_shape(rng) if i else [16, 16, 16], i % 2 == 0)
        cases.append(Case(args, ref.torus_stats(*args)))
    return cases


EXERCISES = [
    Exercise(
        name="ring_collective_time",
        title="Time of a bandwidth-bound collective on one ring axis",
        chapter="sharding",
        tags=("sharding.allgather-reducescatter", "sharding.allreduce-alltoall"),
        entry="ring_collective_time",
        signature="def ring_collective_time(kind: str, array_bytes: float, n: int, link_bandwidth: float,\n"
        "                         bidirectional: bool) -> float:",
        statement="""
`n` chips form a ring (one mesh axis). `array_bytes` is the size of the whole, unsharded array; each
link moves `link_bandwidth` bytes/s in each direction, and a bidirectional algorithm uses both
directions. Ignore latency. Return the time in seconds of `kind`, one of "all_gather",
"reduce_scatter" or "all_reduce" (a reduce-scatter followed by an all-gather); a ring of one chip
takes no time. Raise ValueError for any other kind.""",
        generate=_ring_cases,
    ),
    Exercise(
        name="torus_neighbors",
        title="Neighbours of a chip in a TPU slice",
        chapter="tpus",
        tags=("tpus.networking",),
        entry="torus_neighbors",
        signature="def torus_neighbors(shape: list[int], coord: list[int],\n"
        "                    wraparound: bool) -> list[list[int]]:",
        statement="""
Chips of a slice sit on a grid of the given `shape` and link to the chips one step away along each
axis. With `wraparound`, every axis longer than 2 is a ring (its ends are linked); axes of length 1 or
2 never gain extra links. Return the coordinates of the chips directly linked to `coord`, each once,
as lists sorted lexicographically. Raise ValueError if `coord` is not in the slice.""",
        generate=_neighbor_cases,
    ),
    Exercise(
        name="torus_stats",
        title="Diameter and bisection of a TPU slice",
        chapter="tpus",
        tags=("tpus.networking",),
        entry="torus_stats",
        signature="def torus_stats(shape: list[int], wraparound: bool) -> dict:",
        statement="""
For a slice of the given `shape` with the same link rules as a TPU torus (with `wraparound`, axes
longer than 2 are rings), return a dict with `"max_hops"`, the largest number of links on a shortest
path between two chips, and `"bisection_links"`, the number of links cut when the slice is split in
two halves across its longest axis (the first such axis if several tie; 0 for a single chip).""",
        generate=_stats_cases,
    ),
]
