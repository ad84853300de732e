"""Roofline tasks: intensity, critical batch sizes and time bounds of single operations."""

from __future__ import annotations

from typing import Any

from app.tasks.tasks.solutions import roofline as sol
from app.tasks.tasks.spec import FieldSpec, TaskSpec, fmt, fmt_list

_p0: dict[str, Any] = {"D": 4096, "F": 4096, "batches": [1, 64, 256, 1024, 8192], "peak": 1.97e14, "hbm": 8.2e11}
_p1: dict[str, Any] = {
    "D": 8192,
    "F": 8192,
    "chips": [("A", 1.97e14, 8.2e11), ("B", 4.59e14, 2.765e12), ("C", 9.89e14, 3.35e12)],
}
_p2: dict[str, Any] = {
    "peak": 4.59e14,
    "hbm": 2.765e12,
    "ops": [("square", 8192, 8192, 8192), ("skinny", 16, 8192, 8192), ("thin", 4096, 128, 4096)],
}
_p3: dict[str, Any] = {
    "B": 4096,
    "D": 8192,
    "peak": 9.89e14,
    "hbm": 3.35e12,
    "order": ["add", "relu", "matvec", "matmul"],
}
_p4: dict[str, Any] = {
    "D": 8192,
    "F": 8192,
    "B": 128,
    "hbm": 3.35e12,
    "peak_bf16": 9.89e14,
    "peak_int8": 1.979e15,
    "variants": [
        ("bf16", "bf16", "bf16", "peak_bf16"),
        ("int8-weights", "int8", "bf16", "peak_bf16"),
        ("int8", "int8", "int8", "peak_int8"),
    ],
}
_p5: dict[str, Any] = {"B": 2048, "peak": 4.59e14, "link": 4.5e10, "widths": [4096, 8192, 16384]}
_p6: dict[str, Any] = {"D": 8192, "F": 28672, "batches": [16, 128, 512, 2048], "peak": 9.89e14, "hbm": 3.35e12}

SPECS = [
    TaskSpec(
        number=0,
        category="roofline",
        title="Arithmetic intensity of a bf16 matmul across batch sizes",
        chapter="roofline",
        tags=("roofline.arithmetic-intensity", "roofline.matmul"),
        question=(
            f"A bf16 activation X of shape [B, D] is multiplied by a bf16 weight W of shape [D, F] "
            f"with D = {fmt(_p0['D'])} and F = {fmt(_p0['F'])}; the output [B, F] is bf16. The chip "
            f"peaks at {fmt(_p0['peak'])} bf16 FLOP/s with {fmt(_p0['hbm'])} bytes/s of HBM bandwidth. "
            f"For each batch size B in {fmt_list(_p0['batches'])}, give the FLOPs, the HBM bytes moved, "
            f"the arithmetic intensity and whether the matmul is compute- or memory-bound."
        ),
        params=_p0,
        row_order="one row per batch size, in the order listed.",
        fields=(
            FieldSpec("batch", "integer", "the batch size B"),
            FieldSpec("flops", "number", "FLOPs of the matmul"),
            FieldSpec("bytes", "number", "bytes read and written"),
            FieldSpec("intensity", "number", "FLOPs per byte"),
            FieldSpec("bound", "string", '"compute" or "memory"'),
        ),
        solve=sol.matmul_intensity,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=1,
        category="roofline",
        title="Critical batch size of a bf16 matmul on three chips",
        chapter="roofline",
        tags=("roofline.matmul", "tpus.specs"),
        question=(
            f"A bf16 matmul [B, D] x [D, F] -> [B, F] has D = F = {fmt(_p1['D'])}. Three chips: "
            + "; ".join(
                f"chip {n} with {fmt(pk)} FLOP/s peak and {fmt(bw)} bytes/s HBM bandwidth"
                for n, pk, bw in _p1["chips"]
            )
            + ". For each chip give its ridge intensity (peak FLOP/s over bandwidth) and the smallest "
            "integer batch size B at which the matmul's arithmetic intensity reaches the ridge."
        ),
        params=_p1,
        row_order="one row per chip: A, B, C.",
        fields=(
            FieldSpec("chip", "string", "the chip's letter"),
            FieldSpec("ridge_intensity", "number", "peak FLOP/s divided by HBM bytes/s"),
            FieldSpec("critical_batch", "integer", "smallest B with intensity >= ridge"),
        ),
        solve=sol.critical_batch_per_chip,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=2,
        category="roofline",
        title="Lower and upper time bounds of three matmuls",
        chapter="roofline",
        tags=("roofline.time-bounds",),
        question=(
            f"A chip has {fmt(_p2['peak'])} FLOP/s of bf16 compute and {fmt(_p2['hbm'])} bytes/s of "
            "HBM bandwidth. Three bf16 matmuls [M, K] x [K, N] -> [M, N] run on it: "
            + "; ".join(f'"{n}" with M = {fmt(m)}, K = {fmt(k)}, N = {fmt(nn)}' for n, m, k, nn in _p2["ops"])
            + ". For each, give its compute time, its memory time, its time if compute and memory "
            "overlap perfectly, its time if they do not overlap at all, and what bounds it."
        ),
        params=_p2,
        row_order="one row per matmul in the order listed.",
        fields=(
            FieldSpec("op", "string", "the matmul's name"),
            FieldSpec("t_compute_s", "number", "FLOPs over peak"),
            FieldSpec("t_memory_s", "number", "bytes over bandwidth"),
            FieldSpec("t_overlapped_s", "number", "time with perfect overlap"),
            FieldSpec("t_serial_s", "number", "time with no overlap"),
            FieldSpec("bound", "string", '"compute" or "memory"'),
        ),
        solve=sol.time_bounds,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=3,
        category="roofline",
        title="Elementwise operations, a matrix-vector product and a matmul",
        chapter="roofline",
        tags=("roofline.arithmetic-intensity", "roofline.time-bounds"),
        question=(
            f"X and Y are bf16 arrays of shape [B, D] with B = {fmt(_p3['B'])} and D = {fmt(_p3['D'])}, "
            f"v is a bf16 vector of length D and M a bf16 matrix [D, D]. On a chip with {fmt(_p3['peak'])} "
            f"FLOP/s and {fmt(_p3['hbm'])} bytes/s of HBM bandwidth, consider four operations with bf16 "
            'outputs: "add" computes X + Y, "relu" computes max(X, 0), "matvec" computes X v (a [B] '
            'vector), and "matmul" computes X M. For each give FLOPs, bytes moved, arithmetic intensity '
            "and its time with compute and memory overlapped."
        ),
        params=_p3,
        row_order="add, relu, matvec, matmul.",
        fields=(
            FieldSpec("op", "string", "the operation's name"),
            FieldSpec("flops", "number", "FLOPs"),
            FieldSpec("bytes", "number", "bytes read and written"),
            FieldSpec("intensity", "number", "FLOPs per byte"),
            FieldSpec("time_s", "number", "the larger of compute and memory time"),
        ),
        solve=sol.elementwise_vs_matmul,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=4,
        category="roofline",
        title="Quantized weights and the critical batch size",
        chapter="roofline",
        tags=("roofline.matmul", "roofline.arithmetic-intensity"),
        question=(
            f"A matmul [B, D] x [D, F] -> [B, F] with D = F = {fmt(_p4['D'])} runs on a chip with "
            f"{fmt(_p4['hbm'])} bytes/s of HBM bandwidth, {fmt(_p4['peak_bf16'])} bf16 FLOP/s and "
            f"{fmt(_p4['peak_int8'])} int8 OP/s (count int8 operations like FLOPs). Three variants: "
            '"bf16" (weights, activations and output in bf16, bf16 compute); "int8-weights" (int8 '
            'weights, bf16 activations and output, bf16 compute at the bf16 peak); "int8" (weights, '
            "activations and output in int8, int8 compute at the int8 peak). For each variant at "
            f"B = {fmt(_p4['B'])} give the bytes moved and the arithmetic intensity; then give the "
            "variant's ridge intensity (its peak over the bandwidth) and the smallest integer batch "
            "size at which its intensity reaches that ridge."
        ),
        params=_p4,
        row_order="bf16, int8-weights, int8.",
        fields=(
            FieldSpec("variant", "string", "the variant's name"),
            FieldSpec("bytes", "number", f"bytes moved at B = {fmt(_p4['B'])}"),
            FieldSpec("intensity", "number", f"operations per byte at B = {fmt(_p4['B'])}"),
            FieldSpec("ridge_intensity", "number", "the variant's peak over HBM bandwidth"),
            FieldSpec("critical_batch", "integer", "smallest B with intensity >= ridge"),
        ),
        solve=sol.quantized_weights,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=5,
        category="roofline",
        title="Roofline against a chip-to-chip link",
        chapter="roofline",
        tags=("roofline.network", "roofline.time-bounds"),
        question=(
            f"A pipeline stage multiplies a bf16 activation [B, D] by a bf16 weight [D, D] "
            f"(B = {fmt(_p5['B'])}) and sends the bf16 output [B, D] to the next chip over a link of "
            f"{fmt(_p5['link'])} bytes/s. The chip computes at {fmt(_p5['peak'])} FLOP/s. For each "
            f"width D in {fmt_list(_p5['widths'])}, give the compute time, the time to send the output, "
            "the FLOPs per byte sent, and whether the stage is bound by compute or by communication "
            "(compute when its FLOPs per byte sent is at least peak FLOP/s over link bandwidth)."
        ),
        params=_p5,
        row_order="one row per width, in the order listed.",
        fields=(
            FieldSpec("d_model", "integer", "the width D"),
            FieldSpec("t_compute_s", "number", "matmul FLOPs over peak"),
            FieldSpec("t_comm_s", "number", "bytes sent over link bandwidth"),
            FieldSpec("comm_intensity", "number", "FLOPs per byte sent"),
            FieldSpec("bound", "string", '"compute" or "communication"'),
        ),
        solve=sol.network_roofline,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=6,
        category="roofline",
        title="Fraction of peak reached by an MLP matmul as the batch grows",
        chapter="roofline",
        tags=("roofline.matmul", "roofline.time-bounds"),
        question=(
            f"A bf16 matmul [B, D] x [D, F] -> [B, F] with D = {fmt(_p6['D'])} and F = {fmt(_p6['F'])} "
            f"runs on a chip with {fmt(_p6['peak'])} FLOP/s and {fmt(_p6['hbm'])} bytes/s of HBM "
            "bandwidth, compute and memory traffic overlapping. For each batch size B in "
            f"{fmt_list(_p6['batches'])}, give the compute time, the memory time, and the fraction of "
            "peak FLOP/s the matmul achieves (compute time over actual time)."
        ),
        params=_p6,
        row_order="one row per batch size, in the order listed.",
        fields=(
            FieldSpec("batch", "integer", "the batch size B"),
            FieldSpec("t_compute_s", "number", "FLOPs over peak"),
            FieldSpec("t_memory_s", "number", "bytes over bandwidth"),
            FieldSpec("utilization", "number", "compute time over the larger of the two times"),
        ),
        solve=sol.utilization,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
]
