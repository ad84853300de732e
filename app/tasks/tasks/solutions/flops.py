"""Reference solutions for the FLOPs tasks (sc-007 .. sc-014)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from app.tasks.tasks.conventions import DAY_S, GIB, Conventions, q
from app.tasks.tasks.solutions._common import attention_params, matmul_flops, mlp_params
from app.tasks.tasks.spec import Row


def train_flops(c: Conventions, params: Fraction | int, tokens: Fraction | int) -> Fraction:
    """Forward (one multiply-add per parameter per token) plus a backward pass costing twice it."""
    return 3 * c.flops_per_mac * Fraction(params) * Fraction(tokens)


def forward_backward(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    b, d, f = p["B"], p["D"], p["F"]
    one = matmul_flops(c, b, d, f)
    passes = [("forward", one), ("input_gradient", one), ("weight_gradient", one), ("total", 3 * one)]
    return [{"pass": name, "flops": x, "flops_per_token_param": x / (b * d * f)} for name, x in passes]


def training_compute(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    rate = p["chips"] * q(p["peak"]) * q(p["mfu"])
    rows = []
    for name, params, tokens in p["models"]:
        flops = train_flops(c, q(params), q(tokens))
        rows.append({"model": name, "train_flops": flops, "days": flops / rate / DAY_S})
    return rows


def layer_flops(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    attn = attention_params(p["D"], p["N"], p["K"], p["H"])
    mlp = mlp_params(p["D"], p["F"])
    rows = []
    for name, n in (("attention_projections", attn), ("mlp", mlp), ("layer", attn + mlp)):
        rows.append(
            {
                "block": name,
                "params": n,
                "forward_flops_per_token": c.flops_per_mac * n,
                "training_flops_per_token": train_flops(c, n, 1),
            }
        )
    return rows


def model_params(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, layers, v = p["D"], p["L"], p["V"]
    parts = [
        ("embedding", v * d),
        ("attention", layers * attention_params(d, p["N"], p["K"], p["H"])),
        ("mlp", layers * mlp_params(d, p["F"])),
        ("unembedding", d * v),
    ]
    parts.append(("total", sum(n for _, n in parts)))
    return [{"component": name, "params": n, "bf16_gib": c.bf16_bytes * n / GIB} for name, n in parts]


def attention_share(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, n, k, h, f = p["D"], p["N"], p["K"], p["H"], p["F"]
    matmul = c.flops_per_mac * (attention_params(d, n, k, h) + mlp_params(d, f))
    rows = []
    for s in p["contexts"]:
        attention = 2 * c.flops_per_mac * s * n * h  # scores and weighted values: 2 matmuls
        rows.append(
            {
                "seq_len": s,
                "matmul_flops": matmul,
                "attention_flops": attention,
                "attention_fraction": Fraction(attention, 1) / (attention + matmul),
            }
        )
    return rows


def attention_crossover(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    rows = []
    for name, d, n, k, h, f in p["models"]:
        per_context_token = 2 * c.flops_per_mac * n * h  # attention FLOPs per query token per context token
        proj = Fraction(c.flops_per_mac * attention_params(d, n, k, h), per_context_token)
        mlp = Fraction(c.flops_per_mac * mlp_params(d, f), per_context_token)
        rows.append(
            {"model": name, "seq_len_projections": proj, "seq_len_mlp": mlp, "seq_len_layer": proj + mlp}
        )
    return rows


def moe_versus_dense(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, layers, v = p["D"], p["L"], p["V"]
    attn = attention_params(d, p["N"], p["K"], p["H"])
    expert = mlp_params(d, p["F"])
    rows = []
    for name, experts, active in (("dense", 1, 1), ("moe", p["experts"], p["top_k"])):
        router = d * experts if experts > 1 else 0
        total = v * d + d * v + layers * (attn + experts * expert + router)
        # The embedding is a lookup, not a matmul: it holds parameters but costs no FLOPs.
        used = d * v + layers * (attn + active * expert + router)
        rows.append(
            {
                "model": name,
                "total_params": total,
                "active_params": used,
                "training_flops_per_token": train_flops(c, used, 1),
            }
        )
    return rows


def rematerialization(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    params, tokens = q(p["P"]), q(p["T"])
    attn_proj = p["L"] * attention_params(p["D"], p["N"], p["K"], p["H"])
    base = train_flops(c, params, tokens)
    extra = {
        "none": Fraction(0),
        "full": c.flops_per_mac * params * tokens,  # the whole forward pass runs twice
        "attention_projections": c.flops_per_mac * attn_proj * tokens,
    }
    rate = p["chips"] * q(p["peak"]) * q(p["mfu"])
    rows = []
    for policy in p["policies"]:
        flops = base + extra[policy]
        rows.append(
            {
                "policy": policy,
                "train_flops": flops,
                "overhead_fraction": extra[policy] / base,
                "days": flops / rate / DAY_S,
            }
        )
    return rows
