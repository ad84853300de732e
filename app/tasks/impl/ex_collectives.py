"""Collectives on one ring axis and the TPU torus topology."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise, distinct

_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_reduce", "all_gather")


def _ring_case(rng: random.Random, i: int) -> Case:
    args = (_KINDS[i], rng.randint(2**16, 2**34), rng.randint(2, 64), rng.uniform(1e10, 2e11), i % 2 == 0)
    return Case(args, ref.ring_collective_time(*args))


def _ring_cases(rng: random.Random) -> list[Case]:
    cases = distinct(rng, _ring_case, len(_KINDS))
    # Edge cases: a ring of one chip, and a collective the function must refuse.
    cases.append(Case((rng.choice(_KINDS), rng.randint(2**16, 2**34), 1, rng.uniform(1e10, 2e11), True),
                      0.0, edge=True))
    cases.append(Case((rng.choice(["all_to_all", "broadcast", "permute", "allreduce"]), rng.randint(2**16, 2**30),
                       rng.randint(2, 64), rng.uniform(1e10, 2e11), True), raises="ValueError", edge=True))
    return cases


def _shape(rng: random.Random) -> list[int]:
    """A slice shape with more than one chip."""
    while True:
        shape = [rng.randint(1, 32) for _ in range(rng.choice([2, 3]))]
        if max(shape) > 1:
            return shape


def _neighbor_case(rng: random.Random, i: int) -> Case:
    shape = _shape(rng)
    coord = [rng.randrange(n) for n in shape]
    if i == 0:  # a chip on the edge of a ring axis: only wraparound links reach round
        shape = [rng.randint(3, 16) for _ in range(3)]
        coord = [rng.randrange(n) for n in shape]
        coord[rng.randrange(3)] = 0
    args = (shape, coord, i % 3 != 2)
    return Case(args, ref.torus_neighbors(*args))


def _neighbor_cases(rng: random.Random) -> list[Case]:
    cases = distinct(rng, _neighbor_case, 7)
    shape = _shape(rng)
    outside = [rng.randrange(n) for n in shape]
    axis = rng.randrange(len(shape))
    outside[axis] = rng.choice([-1, shape[axis], shape[axis] + rng.randint(1, 8)])
    cases.append(Case((shape, outside, rng.random() < 0.5), raises="ValueError", edge=True))
    return cases


def _stats_case(rng: random.Random, i: int) -> Case:
    shape = _shape(rng) if i else [rng.randint(4, 16) for _ in range(3)]
    args = (shape, i % 2 == 0)
    return Case(args, ref.torus_stats(*args))


def _stats_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _stats_case, 7)


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
