"""Two book prompts whose words admitted another reading of their data (issue 33): the served
Assumptions now fix it, and the key follows from those words alone (recomputed here)."""

from __future__ import annotations

import math

from app.graders.numeric import grade_numeric
from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.registry import get_bank


def _task(task_id: str):
    return get_bank("book", Settings()).get(task_id)


def _assumptions(prompt: str) -> str:
    return prompt.split("## Assumptions", 1)[1].split("##", 1)[0]


def test_sharding_q3_says_latency_overlaps_the_transfer() -> None:
    task = _task("book/sharding/q3")
    words = _assumptions(task.prompt)
    assert "not added" in words and "4.5e10 bytes/s in each direction" in words and "1 µs" in words
    link, hop, hops = 4.5e10, 1e-6, 3  # 4 chips in a line: an edge shard crosses 3 links one way
    keys = [parse_quantity(g).value for g in task.gold]
    for (e, f), key in zip(((2048, 8192), (256, 256)), keys, strict=True):
        shard = e / 4 * f * 2
        assert math.isclose(key, max(hops * hop, hops * shard / link), rel_tol=0.01)
    # the reading the words now rule out (latency plus transfer) is a wrong answer to the small case
    added = hops * hop + hops * (256 / 4 * 256 * 2) / link
    assert grade_numeric(task.gold, f"Final answer: {keys[0]!r} s, {added!r} s", tolerance=0.05).reward < 1


def test_gpus_q21_names_400e9_as_a_nodes_egress() -> None:
    task = _task("book/gpus/q21")
    words = _assumptions(task.prompt)
    assert "each node sends 400e9 bytes/s" in words and "per GPU in the scale-out" not in words
    peak, nvlink, node_egress, gpus = 2.25e15, 900e9, 400e9, 8
    # data parallelism across nodes: a GPU's backward (4 FLOPs per parameter per token) against its
    # share of the gradient's AllReduce once reduced inside the node (1/8 of it, 2 bytes a value,
    # sent twice) through its NIC's share of the node's egress
    per_gpu_nic = node_egress / gpus
    batch = (2 * 2 / gpus / per_gpu_nic) / (4 / peak)
    keys = [parse_quantity(g).value for g in task.gold]
    assert math.isclose(keys[0], peak / nvlink, rel_tol=0.01)
    assert math.isclose(keys[1], batch, rel_tol=0.01)
