"""Reference solutions for the sharding tasks (sc-021 .. sc-027)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from app.tasks.tasks.conventions import Conventions, q
from app.tasks.tasks.solutions._common import all_gather_time, all_reduce_time, matmul_flops
from app.tasks.tasks.solutions.flops import train_flops
from app.tasks.tasks.spec import Row


def all_gather_scaling(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    v = c.bf16_bytes * p["rows"] * p["cols"]
    w = q(p["W"])
    return [
        {"chips": n, "time_s": all_gather_time(c, n, v, w), "bytes_in_per_chip": c.ring(n) * v}
        for n in p["chips"]
    ]


def collective_costs(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    v, n, w = c.bf16_bytes * p["rows"] * p["cols"], p["N"], q(p["W"])
    gather = all_gather_time(c, n, v, w)
    times = {"all_gather": gather, "reduce_scatter": gather, "all_reduce": all_reduce_time(c, n, v, w)}
    return [{"collective": k, "time_s": t, "time_vs_all_gather": t / gather} for k, t in times.items()]


def sharded_matmul_cases(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    i, j, k, n, w = p["I"], p["J"], p["K"], p["N"], q(p["W"])
    e = c.bf16_bytes
    # What each case must communicate to produce the output sharding the task asks for.
    needs = {
        "local": ("none", Fraction(0)),
        "contracting": ("all_reduce", e * i * k),  # partial sums of C[I, K] on every chip
        "gather_lhs": ("all_gather", e * i * j),  # A[I, J_X] must be unsharded first
        "gather_rhs": ("all_gather", e * j * k),  # B[J, K_X] must be unsharded first
    }
    rows = []
    for name in p["cases"]:
        collective, v = needs[name]
        if collective == "all_reduce":
            t = all_reduce_time(c, n, v, w)
        elif collective == "all_gather":
            t = all_gather_time(c, n, v, w)
        else:
            t = Fraction(0)
        rows.append({"case": name, "collective": collective, "comm_bytes": v, "comm_s": t})
    return rows


def data_parallel_allreduce(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, tokens = q(p["P"]), p["tokens_per_chip"]
    grads = c.bf16_bytes * params
    compute = train_flops(c, params, tokens) / (q(p["peak"]) * q(p["mfu"]))
    rows = []
    for n in p["chips"]:
        comm = all_reduce_time(c, n, grads, q(p["W"]))
        rows.append(
            {
                "chips": n,
                "allreduce_s": comm,
                "compute_s": compute,
                "ratio": comm / compute,
                "tokens_per_chip_to_hide": tokens * comm / compute,
            }
        )
    return rows


def fsdp_step(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, n, w, peak = q(p["P"]), p["N"], q(p["W"]), q(p["peak"])
    v = c.bf16_bytes * params
    # Weights gathered for the forward and again for the backward pass; gradients reduce-scattered.
    comm = 3 * all_gather_time(c, n, v, w)
    rows = []
    for tokens in p["tokens"]:
        compute = train_flops(c, params, tokens) / peak
        rows.append(
            {
                "tokens_per_chip": tokens,
                "comm_s": comm,
                "compute_s": compute,
                "bound": "compute" if compute >= comm else "communication",
            }
        )
    return rows


def tensor_parallel_mlp(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    t, d, f, w, peak = p["T"], p["D"], p["F"], q(p["W"]), q(p["peak"])
    activations = c.bf16_bytes * t * d
    rows = []
    for n in p["degrees"]:
        compute = 3 * matmul_flops(c, t, d, f) / (n * peak)  # three [D, F]-sized matmuls, split n ways
        comm = 2 * all_gather_time(c, n, activations, w)  # all-gather in, reduce-scatter out
        rows.append(
            {
                "tp_degree": n,
                "compute_s": compute,
                "comm_s": comm,
                "bound": "compute" if compute >= comm else "communication",
            }
        )
    return rows


def two_axis_gather(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    v = c.bf16_bytes * p["rows"] * p["cols"]
    axes = {"X": (p["X"], q(p["WX"])), "Y": (p["Y"], q(p["WY"]))}
    rows = []
    for first, second in (("X", "Y"), ("Y", "X")):
        (n1, w1), (n2, w2) = axes[first], axes[second]
        # After the first gather each chip holds 1/n2 of the array; the second gathers all of it.
        t1 = all_gather_time(c, n1, v / n2, w1)
        t2 = all_gather_time(c, n2, v, w2)
        rows.append({"strategy": f"{first}_then_{second}", "first_s": t1, "second_s": t2, "total_s": t1 + t2})
    return rows
