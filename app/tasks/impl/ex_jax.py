"""JAX sharding on a CPU mesh of 8 host devices (the harness gives every child 8 devices).

Expected values are computed here without JAX (small integer-valued float32 inputs, so every sum
is exact). The harness reads a returned jax.Array's values and the mesh and partition spec it
declares as plain data; a trusted child that never ran candidate code places those values with
that sharding and reports what it really is (app/graders/impl_jax.py), which is checked against
the properties each case requires."""

from __future__ import annotations

import random
from typing import Any

from app.tasks.impl.spec import Case, Exercise, array


def _matrix(rng: random.Random, rows: int, cols: int) -> list[list[float]]:
    return [[float(rng.randint(-4, 4)) for _ in range(cols)] for _ in range(rows)]


def _matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in zip(*b, strict=True)] for row in a]


def _shard_rows_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(3):
        rows, cols = 8 * rng.randint(1, 5), rng.randint(1, 8)
        x = _matrix(rng, rows, cols)
        need: dict[str, Any] = {"spec": ["data", None], "mesh": {"data": 8}, "num_devices": 8,
                                "shard_shapes": [[rows // 8, cols]]}
        cases.append(Case((array(x),), x, sharding=need))
    return cases


def _matmul_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(2):
        b, d, f = 4 * rng.randint(1, 5), rng.randint(2, 8), 2 * rng.randint(1, 4)
        x, w = _matrix(rng, b, d), _matrix(rng, d, f)
        need = {"spec": ["data", "model"], "mesh": {"data": 4, "model": 2}, "num_devices": 8,
                "shard_shapes": [[b // 4, f // 2]]}
        cases.append(Case((array(x), array(w)), _matmul(x, w), sharding=need))
    return cases


def _column_sum_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(2):
        rows, cols = 8 * rng.randint(1, 4), rng.randint(2, 6)
        x = _matrix(rng, rows, cols)
        sums = [sum(col) for col in zip(*x, strict=True)]
        cases.append(Case((array(x),), sums, sharding={"fully_replicated": True, "num_devices": 8}))
    return cases


_MESH_NOTE = (
    "The function runs with 8 CPU devices available (`jax.devices()` has length 8); build any mesh "
    "from them. The grader reads the returned array's values and the mesh and `PartitionSpec` of its "
    "`NamedSharding`, and places those values that way itself to check the sharding."
)

EXERCISES = [
    Exercise(
        name="jax_shard_rows",
        title="Place an array on a device mesh with NamedSharding",
        chapter="jax-stuff",
        tags=("jax.auto-sharding", "sharding.notation"),
        entry="shard_rows",
        signature="def shard_rows(x: 'numpy.ndarray') -> 'jax.Array':",
        statement=f"""
{_MESH_NOTE} Build a one-dimensional `Mesh` of the 8 devices with the axis name "data" and return `x`
(a float32 matrix whose row count is a multiple of 8) as a `jax.Array` with a `NamedSharding` whose
`PartitionSpec` splits the rows over "data" and replicates the columns.""",
        generate=_shard_rows_cases,
        profile="jax",
    ),
    Exercise(
        name="jax_sharded_matmul",
        title="A jitted matmul with explicit input and output shardings",
        chapter="jax-stuff",
        tags=("jax.auto-sharding", "sharding.matmul-cases"),
        entry="sharded_matmul",
        signature="def sharded_matmul(x: 'numpy.ndarray', w: 'numpy.ndarray') -> 'jax.Array':",
        statement=f"""
{_MESH_NOTE} Arrange the devices as a 4 x 2 `Mesh` with axes ("data", "model"). Compute `x @ w` with
`jax.jit`, passing `in_shardings` that shard `x`'s rows over "data" (columns replicated) and `w`'s
columns over "model" (rows replicated), and `out_shardings` that shard the result's rows over "data"
and its columns over "model". Return the resulting `jax.Array`.""",
        generate=_matmul_cases,
        profile="jax",
    ),
    Exercise(
        name="jax_shard_map_psum",
        title="Column sums with shard_map and an explicit collective",
        chapter="jax-stuff",
        tags=("jax.explicit-sharding", "sharding.allreduce-alltoall"),
        entry="shardmap_column_sums",
        signature="def shardmap_column_sums(x: 'numpy.ndarray') -> 'jax.Array':",
        statement=f"""
{_MESH_NOTE} With a one-dimensional mesh of the 8 devices (axis "i"), use `shard_map` to split the rows
of `x` (their count is a multiple of 8) over "i": each device sums its own rows, and a collective
combines the partial sums so that every device holds the column sums of the whole of `x`. Return
them as a `jax.Array` of shape [columns], replicated over the mesh.""",
        generate=_column_sum_cases,
        profile="jax",
    ),
]
