"""Sharding tasks: collective costs, sharded matmuls, data, fully sharded and tensor parallelism."""

from __future__ import annotations

from typing import Any

from app.tasks.tasks.solutions import sharding as sol
from app.tasks.tasks.spec import FieldSpec, TaskSpec, fmt, fmt_list

_p21: dict[str, Any] = {"rows": 8192, "cols": 28672, "W": 4.5e10, "chips": [2, 4, 16, 64]}
_p22: dict[str, Any] = {"rows": 16384, "cols": 8192, "N": 16, "W": 9e10}
_p23: dict[str, Any] = {
    "I": 4096,
    "J": 8192,
    "K": 28672,
    "N": 8,
    "W": 9e10,
    "cases": ["local", "contracting", "gather_lhs", "gather_rhs"],
}
_p24: dict[str, Any] = {
    "P": 8e9,
    "tokens_per_chip": 1536,
    "peak": 9.18e14,
    "mfu": 0.7,
    "W": 4.5e10,
    "chips": [8, 64, 512],
}
_p25: dict[str, Any] = {"P": 7e10, "N": 256, "W": 9e10, "peak": 4.59e14, "tokens": [512, 2048, 8192]}
_p26: dict[str, Any] = {"T": 8192, "D": 8192, "F": 28672, "W": 9e10, "peak": 4.59e14, "degrees": [2, 4, 8, 16, 32]}
_p27: dict[str, Any] = {"rows": 32768, "cols": 8192, "X": 4, "Y": 16, "WX": 9e10, "WY": 4.5e10}

SPECS = [
    TaskSpec(
        number=21,
        category="sharding",
        title="All-gather time as the ring grows",
        chapter="sharding",
        tags=("sharding.allgather-reducescatter",),
        question=(
            f"A bf16 weight of shape [{fmt(_p21['rows'])}, {fmt(_p21['cols'])}] is sharded evenly over a "
            f"ring of chips and all-gathered so every chip holds all of it. Each chip moves "
            f"{fmt(_p21['W'])} bytes/s. For rings of {fmt_list(_p21['chips'])} chips, give the "
            "all-gather time and the bytes each chip receives."
        ),
        params=_p21,
        row_order="one row per ring size, in the order listed.",
        fields=(
            FieldSpec("chips", "integer", "ring size"),
            FieldSpec("time_s", "number", "all-gather time"),
            FieldSpec("bytes_in_per_chip", "number", "bytes each chip receives"),
        ),
        solve=sol.all_gather_scaling,
        slips=frozenset({"missing_ring_factor", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=22,
        category="sharding",
        title="All-gather, reduce-scatter and all-reduce of the same array",
        chapter="sharding",
        tags=("sharding.allgather-reducescatter", "sharding.allreduce-alltoall"),
        question=(
            f"On a ring of {fmt(_p22['N'])} chips, each moving {fmt(_p22['W'])} bytes/s, consider a bf16 "
            f"array whose full size is [{fmt(_p22['rows'])}, {fmt(_p22['cols'])}]. Give the time of an "
            "all-gather of it, of a reduce-scatter of it, and of an all-reduce of it, and each time "
            "divided by the all-gather's."
        ),
        params=_p22,
        row_order="all_gather, reduce_scatter, all_reduce.",
        fields=(
            FieldSpec("collective", "string", '"all_gather", "reduce_scatter" or "all_reduce"'),
            FieldSpec("time_s", "number", "time of the collective"),
            FieldSpec("time_vs_all_gather", "number", "time over the all-gather's time"),
        ),
        solve=sol.collective_costs,
        slips=frozenset({"missing_ring_factor", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=23,
        category="sharding",
        title="Which collective a sharded matmul needs",
        chapter="sharding",
        tags=("sharding.matmul-cases", "sharding.notation"),
        question=(
            f"C = A B with bf16 A of shape [I, J] and B of shape [J, K], I = {fmt(_p23['I'])}, "
            f"J = {fmt(_p23['J'])}, K = {fmt(_p23['K'])}, on a mesh axis X of {fmt(_p23['N'])} chips "
            f"(a ring, {fmt(_p23['W'])} bytes/s per chip). Subscript X marks a dimension sharded over "
            'X. Four cases, each with the output sharding wanted: "local": A[I_X, J] B[J, K] -> '
            'C[I_X, K]; "contracting": A[I, J_X] B[J_X, K] -> C[I, K] replicated on every chip; '
            '"gather_lhs": A[I, J_X] B[J, K] -> C[I, K]; "gather_rhs": A[I_X, J] B[J, K_X] -> '
            'C[I_X, K]. For each, name the single cheapest collective needed ("none", '
            '"all_gather", "reduce_scatter" or "all_reduce"), the full size in bytes of the array it '
            "operates on (0 if none), and its time (0 if none)."
        ),
        params=_p23,
        row_order="local, contracting, gather_lhs, gather_rhs.",
        fields=(
            FieldSpec("case", "string", "the case's name"),
            FieldSpec("collective", "string", "the collective needed"),
            FieldSpec("comm_bytes", "number", "full size of the communicated array in bytes"),
            FieldSpec("comm_s", "number", "time of the collective"),
        ),
        solve=sol.sharded_matmul_cases,
        slips=frozenset({"missing_ring_factor", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=24,
        category="sharding",
        title="Data-parallel gradient all-reduce against the step it overlaps",
        chapter="training",
        tags=("training.data-parallel", "sharding.allreduce-alltoall"),
        question=(
            f"A model of {fmt(_p24['P'])} parameters is trained with pure data parallelism; each chip "
            f"processes {fmt(_p24['tokens_per_chip'])} tokens per step at {fmt(_p24['mfu'])} of its "
            f"{fmt(_p24['peak'])} FLOP/s peak, and the bf16 gradients are all-reduced over a ring "
            f"at {fmt(_p24['W'])} bytes/s per chip, overlapped with the step's compute. For "
            f"{fmt_list(_p24['chips'])} chips, give the all-reduce time, the step's compute time, "
            "their ratio (all-reduce over compute), and the tokens per chip at which the compute "
            "time would equal the all-reduce time."
        ),
        params=_p24,
        row_order="one row per chip count, in the order listed.",
        fields=(
            FieldSpec("chips", "integer", "data-parallel degree"),
            FieldSpec("allreduce_s", "number", "gradient all-reduce time"),
            FieldSpec("compute_s", "number", "compute time of one step"),
            FieldSpec("ratio", "number", "all-reduce time over compute time"),
            FieldSpec(
                "tokens_per_chip_to_hide", "number", "tokens per chip making compute equal the all-reduce"
            ),
        ),
        solve=sol.data_parallel_allreduce,
        slips=frozenset({"missing_ring_factor", "mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=25,
        category="sharding",
        title="FSDP communication against compute per step",
        chapter="training",
        tags=("training.fsdp", "sharding.allgather-reducescatter"),
        question=(
            f"A model of {fmt(_p25['P'])} parameters is trained with FSDP over a ring of "
            f"{fmt(_p25['N'])} chips ({fmt(_p25['W'])} bytes/s per chip, {fmt(_p25['peak'])} FLOP/s "
            "peak, compute at peak). Each step all-gathers the bf16 weights for the forward pass, "
            "all-gathers them again for the backward pass and reduce-scatters the bf16 gradients. "
            f"For {fmt_list(_p25['tokens'])} tokens per chip per step, give the communication time, "
            "the compute time, and whether the step is bound by compute or by communication "
            "(compute when compute time is at least communication time)."
        ),
        params=_p25,
        row_order="one row per token count, in the order listed.",
        fields=(
            FieldSpec("tokens_per_chip", "integer", "tokens per chip per step"),
            FieldSpec("comm_s", "number", "time of the three collectives"),
            FieldSpec("compute_s", "number", "training FLOPs per chip over peak"),
            FieldSpec("bound", "string", '"compute" or "communication"'),
        ),
        solve=sol.fsdp_step,
        slips=frozenset({"missing_ring_factor", "mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=26,
        category="sharding",
        title="Tensor-parallel MLP: where communication takes over",
        chapter="training",
        tags=("training.tensor-parallel", "sharding.matmul-cases"),
        question=(
            f"A gated MLP (three matmuls of D x F weights, D = {fmt(_p26['D'])}, F = {fmt(_p26['F'])}) "
            f"processes {fmt(_p26['T'])} tokens in its forward pass with tensor parallelism over a ring "
            f"of n chips, its F dimension split n ways. Each chip computes at {fmt(_p26['peak'])} "
            f"FLOP/s and moves {fmt(_p26['W'])} bytes/s. Before the MLP the bf16 activations "
            "[tokens, D] are all-gathered and after it the bf16 output [tokens, D] is "
            f"reduce-scattered. For n in {fmt_list(_p26['degrees'])}, give the forward compute time, "
            "the communication time, and the bound (compute when compute time is at least "
            "communication time)."
        ),
        params=_p26,
        row_order="one row per degree n, in the order listed.",
        fields=(
            FieldSpec("tp_degree", "integer", "n"),
            FieldSpec("compute_s", "number", "forward matmul time per chip"),
            FieldSpec("comm_s", "number", "all-gather plus reduce-scatter time"),
            FieldSpec("bound", "string", '"compute" or "communication"'),
        ),
        solve=sol.tensor_parallel_mlp,
        slips=frozenset({"missing_ring_factor", "mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=27,
        category="sharding",
        title="All-gather over two mesh axes in either order",
        chapter="sharding",
        tags=("sharding.allgather-reducescatter", "sharding.notation"),
        question=(
            f"A bf16 array of shape [{fmt(_p27['rows'])}, {fmt(_p27['cols'])}] is sharded over a "
            f"{fmt(_p27['X'])} x {fmt(_p27['Y'])} mesh (axis X of {fmt(_p27['X'])} chips, axis Y of "
            f"{fmt(_p27['Y'])}), each chip holding an equal block. Along X each chip moves "
            f"{fmt(_p27['WX'])} bytes/s, along Y {fmt(_p27['WY'])} bytes/s; both axes are rings. It "
            "is fully gathered in two stages, one all-gather per axis. For the order X then Y and "
            "the order Y then X, give the first stage's time, the second stage's time and the total."
        ),
        params=_p27,
        row_order="X_then_Y, Y_then_X.",
        fields=(
            FieldSpec("strategy", "string", '"X_then_Y" or "Y_then_X"'),
            FieldSpec("first_s", "number", "first all-gather's time"),
            FieldSpec("second_s", "number", "second all-gather's time"),
            FieldSpec("total_s", "number", "sum of both"),
        ),
        solve=sol.two_axis_gather,
        slips=frozenset({"missing_ring_factor", "bf16_as_one_byte"}),
    ),
]
