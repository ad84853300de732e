"""Reference solutions for the memory tasks (sc-015 .. sc-020)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from app.tasks.tasks.conventions import ADAM_BYTES, GIB, Conventions, q
from app.tasks.tasks.solutions._common import ceil_int, floor_int
from app.tasks.tasks.spec import Row


def training_bytes_per_param(c: Conventions) -> Fraction:
    """bf16 weights and gradients plus the fp32 Adam state."""
    return 2 * c.bf16_bytes + ADAM_BYTES


def kv_bytes_per_token(c: Conventions, layers: int, kv_heads: int, head_dim: int) -> Fraction:
    return 2 * layers * kv_heads * head_dim * c.bf16_bytes


def adam_breakdown(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params = q(p["P"])
    parts = [
        ("weights", c.bf16_bytes),
        ("gradients", c.bf16_bytes),
        ("adam_state", ADAM_BYTES),
        ("total", training_bytes_per_param(c)),
    ]
    return [
        {
            "component": name,
            "bytes_per_param": b,
            "gib": b * params / GIB,
            "multiple_of_weights": b / c.bf16_bytes,
        }
        for name, b in parts
    ]


def chips_to_hold(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    per_chip = q(p["hbm_gib"]) * GIB
    rows = []
    for name, params in p["models"]:
        total = training_bytes_per_param(c) * q(params)
        rows.append({"model": name, "total_gib": total / GIB, "chips": ceil_int(total / per_chip)})
    return rows


def sharded_state(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, hbm = q(p["P"]), q(p["hbm_gib"]) * GIB
    w = g = c.bf16_bytes
    rows = []
    for scheme, n in p["cases"]:
        if scheme == "zero1":  # only the optimizer state is sharded
            per_param = w + g + ADAM_BYTES / n
        elif scheme == "zero2":  # optimizer state and gradients
            per_param = w + (g + ADAM_BYTES) / n
        else:  # fsdp: everything
            per_param = (w + g + ADAM_BYTES) / n
        per_chip = per_param * params
        rows.append({"scheme": scheme, "chips": n, "per_chip_gib": per_chip / GIB, "fits": per_chip <= hbm})
    return rows


def kv_cache_variants(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    tokens = p["S"] * p["batch"]
    rows = []
    for name, kv_heads in p["variants"]:
        per_token = kv_bytes_per_token(c, p["L"], kv_heads, p["H"])
        rows.append(
            {
                "config": name,
                "kv_heads": kv_heads,
                "bytes_per_token": per_token,
                "cache_gib": per_token * tokens / GIB,
            }
        )
    return rows


def checkpoint_memory(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    hbm = q(p["hbm_gib"]) * GIB
    rows = []
    for tokens in p["tokens"]:
        saved = p["L"] * tokens * p["D"] * c.bf16_bytes  # one [tokens, D] input per layer
        rows.append(
            {"tokens_per_chip": tokens, "checkpoint_gib": saved / GIB, "fraction_of_hbm": saved / hbm}
        )
    return rows


def serving_batch(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    free = p["chips"] * q(p["hbm_gib"]) * GIB - c.bf16_bytes * q(p["P"])
    per_token = kv_bytes_per_token(c, p["L"], p["K"], p["H"])
    rows = []
    for ctx in p["contexts"]:
        per_seq = per_token * ctx
        rows.append(
            {"context_len": ctx, "kv_gib_per_sequence": per_seq / GIB, "max_batch": floor_int(free / per_seq)}
        )
    return rows
