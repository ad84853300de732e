"""Reference solutions for the inference tasks (sc-028 .. sc-034)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from app.tasks.tasks.conventions import GIB, INT4_BYTES, INT8_BYTES, Conventions, q
from app.tasks.tasks.solutions.memory import kv_bytes_per_token
from app.tasks.tasks.spec import Row


def decode_bandwidth_bound(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    bw = q(p["bw"])
    rows = []
    for name, params in p["models"]:
        weights = c.bf16_bytes * q(params)
        step = weights / bw  # every weight is read once per generated token
        rows.append(
            {"model": name, "weight_gb": weights / 10**9, "step_ms": 1000 * step, "tokens_per_s": 1 / step}
        )
    return rows


def decode_batches(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, peak, hbm = q(p["P"]), q(p["peak"]), q(p["hbm"])
    kv = kv_bytes_per_token(c, p["L"], p["K"], p["H"]) * p["context"]
    rows = []
    for b in p["batches"]:
        memory = (c.bf16_bytes * params + b * kv) / hbm
        compute = c.flops_per_mac * params * b / peak
        step = max(memory, compute)
        rows.append(
            {"batch": b, "memory_s": memory, "compute_s": compute, "step_s": step, "tokens_per_s": b / step}
        )
    return rows


def decode_critical_batch(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    ridge = q(p["peak"]) / q(p["hbm"])
    sizes = {"bf16": c.bf16_bytes, "int8": INT8_BYTES, "int4": INT4_BYTES}
    rows = []
    for name in p["weights"]:
        w = sizes[name]
        # Decode intensity is (mac * P * B) / (w * P): batch B reaches the ridge at ridge * w / mac.
        rows.append({"weights": name, "bytes_per_param": w, "critical_batch": ridge * w / c.flops_per_mac})
    return rows


def prefill_roofline(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, n = q(p["P"]), p["chips"]
    memory = c.bf16_bytes * params / (n * q(p["hbm"]))
    rows = []
    for t in p["prompts"]:
        compute = c.flops_per_mac * params * t / (n * q(p["peak"]))
        rows.append(
            {
                "prompt_tokens": t,
                "compute_s": compute,
                "memory_s": memory,
                "time_s": max(compute, memory),
                "bound": "compute" if compute >= memory else "memory",
            }
        )
    return rows


def sharded_latency(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    weights, hbm_bytes = c.bf16_bytes * q(p["P"]), q(p["hbm_gib"]) * GIB
    rows = []
    for n in p["chips"]:
        per_chip = weights / n
        step = per_chip / q(p["bw"])  # all chips read their shard in parallel
        rows.append(
            {
                "chips": n,
                "weights_gib_per_chip": per_chip / GIB,
                "fits": per_chip <= hbm_bytes,
                "step_ms": 1000 * step,
                "tokens_per_s": 1 / step,
            }
        )
    return rows


def serving_cost(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, n = q(p["P"]), p["chips"]
    kv = kv_bytes_per_token(c, p["L"], p["K"], p["H"]) * p["context"]
    rows = []
    for b in p["batches"]:
        memory = (c.bf16_bytes * params + b * kv) / (n * q(p["hbm"]))
        compute = c.flops_per_mac * params * b / (n * q(p["peak"]))
        step = max(memory, compute)
        rate = b / step
        usd_per_s = n * q(p["usd_per_chip_hour"]) / 3600
        rows.append(
            {
                "batch": b,
                "step_ms": 1000 * step,
                "tokens_per_s": rate,
                "usd_per_million_tokens": usd_per_s / rate * 10**6,
            }
        )
    return rows


def disaggregated_transfer(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, n = q(p["P"]), p["chips"]
    per_token = kv_bytes_per_token(c, p["L"], p["K"], p["H"])
    rows = []
    for t in p["prompts"]:
        kv = per_token * t
        # Every prompt token attends to the whole prompt: 4*T*N*H FLOPs per token per layer.
        attention = p["L"] * 2 * c.flops_per_mac * Fraction(t) * t * p["N"] * p["H"]
        prefill = (c.flops_per_mac * params * t + attention) / (n * q(p["peak"]))
        transfer = kv / (n * q(p["dcn"]))
        rows.append(
            {
                "prompt_tokens": t,
                "kv_bytes": kv,
                "prefill_s": prefill,
                "transfer_s": transfer,
                "transfer_fraction": transfer / prefill,
            }
        )
    return rows
