"""Reference solutions for the roofline tasks (sc-000 .. sc-006)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.tasks.tasks.conventions import INT8_BYTES, Conventions, q
from app.tasks.tasks.solutions._common import bound, ceil_int, matmul_bytes, matmul_flops
from app.tasks.tasks.spec import Row


def matmul_intensity(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, f = p["D"], p["F"]
    ridge = q(p["peak"]) / q(p["hbm"])
    rows = []
    for b in p["batches"]:
        flops = matmul_flops(c, b, d, f)
        nbytes = matmul_bytes(b, d, f, lhs=c.bf16_bytes, rhs=c.bf16_bytes, out=c.bf16_bytes)
        rows.append(
            {
                "batch": b,
                "flops": flops,
                "bytes": nbytes,
                "intensity": flops / nbytes,
                "bound": bound(flops / nbytes, ridge),
            }
        )
    return rows


def critical_batch(c: Conventions, d: int, f: int, ridge: Any, *, act: Any, weight: Any) -> int:
    """Smallest integer batch B whose [B, d] @ [d, f] intensity reaches the ridge:
    mac*B*d*f >= ridge * (act*B*(d + f) + weight*d*f)."""
    denominator = c.flops_per_mac * d * f - ridge * act * (d + f)
    if denominator <= 0:
        raise ValueError("this matmul never becomes compute-bound")
    return ceil_int(ridge * weight * d * f / denominator)


def critical_batch_per_chip(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    rows = []
    for name, peak, hbm in p["chips"]:
        ridge = q(peak) / q(hbm)
        b = critical_batch(c, p["D"], p["F"], ridge, act=c.bf16_bytes, weight=c.bf16_bytes)
        rows.append({"chip": name, "ridge_intensity": ridge, "critical_batch": b})
    return rows


def time_bounds(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    peak, hbm = q(p["peak"]), q(p["hbm"])
    rows = []
    for name, m, k, n in p["ops"]:
        flops = matmul_flops(c, m, k, n)
        nbytes = matmul_bytes(m, k, n, lhs=c.bf16_bytes, rhs=c.bf16_bytes, out=c.bf16_bytes)
        t_c, t_m = flops / peak, nbytes / hbm
        rows.append(
            {
                "op": name,
                "t_compute_s": t_c,
                "t_memory_s": t_m,
                "t_overlapped_s": max(t_c, t_m),
                "t_serial_s": t_c + t_m,
                "bound": bound(flops / nbytes, peak / hbm),
            }
        )
    return rows


def elementwise_vs_matmul(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    b, d = p["B"], p["D"]
    peak, hbm = q(p["peak"]), q(p["hbm"])
    e = c.bf16_bytes
    ops = {
        "add": (b * d, 3 * e * b * d),
        "relu": (b * d, 2 * e * b * d),
        "matvec": (matmul_flops(c, b, d, 1), matmul_bytes(b, d, 1, lhs=e, rhs=e, out=e)),
        "matmul": (matmul_flops(c, b, d, d), matmul_bytes(b, d, d, lhs=e, rhs=e, out=e)),
    }
    rows = []
    for name in p["order"]:
        flops, nbytes = ops[name]
        rows.append(
            {
                "op": name,
                "flops": flops,
                "bytes": nbytes,
                "intensity": flops / nbytes,
                "time_s": max(flops / peak, nbytes / hbm),
            }
        )
    return rows


def quantized_weights(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, f, batch, hbm = p["D"], p["F"], p["B"], q(p["hbm"])
    dtype_bytes = {"bf16": c.bf16_bytes, "int8": INT8_BYTES}
    rows = []
    for name, weights, acts, peak_key in p["variants"]:
        w, a = dtype_bytes[weights], dtype_bytes[acts]
        ridge = q(p[peak_key]) / hbm
        nbytes = matmul_bytes(batch, d, f, lhs=a, rhs=w, out=a)
        rows.append(
            {
                "variant": name,
                "bytes": nbytes,
                "intensity": matmul_flops(c, batch, d, f) / nbytes,
                "ridge_intensity": ridge,
                "critical_batch": critical_batch(c, d, f, ridge, act=a, weight=w),
            }
        )
    return rows


def network_roofline(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    b, peak, link = p["B"], q(p["peak"]), q(p["link"])
    rows = []
    for d in p["widths"]:
        flops = matmul_flops(c, b, d, d)
        sent = c.bf16_bytes * b * d
        rows.append(
            {
                "d_model": d,
                "t_compute_s": flops / peak,
                "t_comm_s": sent / link,
                "comm_intensity": flops / sent,
                "bound": bound(flops / sent, peak / link, "communication"),
            }
        )
    return rows


def utilization(p: Mapping[str, Any], c: Conventions) -> list[Row]:
    d, f, peak, hbm = p["D"], p["F"], q(p["peak"]), q(p["hbm"])
    e = c.bf16_bytes
    rows = []
    for b in p["batches"]:
        t_c = matmul_flops(c, b, d, f) / peak
        t_m = matmul_bytes(b, d, f, lhs=e, rhs=e, out=e) / hbm
        rows.append({"batch": b, "t_compute_s": t_c, "t_memory_s": t_m, "utilization": t_c / max(t_c, t_m)})
    return rows
