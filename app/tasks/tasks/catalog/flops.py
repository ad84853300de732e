"""FLOPs tasks: forward and backward costs, 6PT, parameter counts, attention's share, MoE, remat."""

from __future__ import annotations

from typing import Any

from app.tasks.tasks.solutions import flops as sol
from app.tasks.tasks.spec import FieldSpec, TaskSpec, fmt, fmt_list

_LLAMA70 = {"L": 80, "D": 8192, "N": 64, "K": 8, "H": 128, "F": 28672, "V": 128256}


def _layer_text(p: dict) -> str:
    return (
        f"D = {fmt(p['D'])}, N = {fmt(p['N'])} query heads, K = {fmt(p['K'])} key/value heads, "
        f"H = {fmt(p['H'])}, F = {fmt(p['F'])}"
    )


_p7: dict[str, Any] = {"B": 16384, "D": 8192, "F": 28672}
_p8: dict[str, Any] = {
    "chips": 16384,
    "peak": 9.89e14,
    "mfu": 0.4,
    "models": [("8B", 8.03e9, 1.5e13), ("70B", 7.06e10, 1.5e13), ("405B", 4.059e11, 1.56e13)],
}
_p9: dict[str, Any] = {k: _LLAMA70[k] for k in ("D", "N", "K", "H", "F")}
_p10 = dict(_LLAMA70)
_p11: dict[str, Any] = {"D": 5376, "N": 42, "K": 42, "H": 128, "F": 21504, "contexts": [2048, 8192, 32768, 43008]}
_p12: dict[str, Any] = {
    "models": [
        ("A", 4096, 32, 8, 128, 14336),
        ("B", 8192, 64, 8, 128, 28672),
        ("C", 5376, 42, 42, 128, 21504),
    ]
}
_p13: dict[str, Any] = {
    "L": 32,
    "D": 4096,
    "N": 32,
    "K": 8,
    "H": 128,
    "F": 14336,
    "V": 128000,
    "experts": 8,
    "top_k": 2,
}
_p14: dict[str, Any] = dict(
    {k: _LLAMA70[k] for k in ("L", "D", "N", "K", "H", "F")},
    P=7.06e10,
    T=1.5e13,
    chips=8192,
    peak=4.59e14,
    mfu=0.5,
    policies=["none", "full", "attention_projections"],
)

SPECS = [
    TaskSpec(
        number=7,
        category="flops",
        title="Forward and backward FLOPs of one matmul",
        chapter="transformers",
        tags=("transformers.dot-flops",),
        question=(
            f"In training, a token batch X of shape [B, D] multiplies a weight W of shape [D, F] with "
            f"B = {fmt(_p7['B'])}, D = {fmt(_p7['D'])} and F = {fmt(_p7['F'])}. Give the FLOPs of the "
            "forward matmul, of the matmul producing the gradient with respect to X, of the matmul "
            "producing the gradient with respect to W, and their total; for each, also give the FLOPs "
            "divided by B·D·F."
        ),
        params=_p7,
        row_order="forward, input_gradient, weight_gradient, total.",
        fields=(
            FieldSpec("pass", "string", '"forward", "input_gradient", "weight_gradient" or "total"'),
            FieldSpec("flops", "number", "FLOPs"),
            FieldSpec("flops_per_token_param", "number", "FLOPs over B·D·F"),
        ),
        solve=sol.forward_backward,
        slips=frozenset({"mac_as_one_flop"}),
    ),
    TaskSpec(
        number=8,
        category="flops",
        title="Training compute and wall-clock days for three model sizes",
        chapter="transformers",
        tags=("transformers.6nd", "applied-training.counting"),
        question=(
            f"Three dense models are trained on a cluster of {fmt(_p8['chips'])} chips, each with a peak "
            f"of {fmt(_p8['peak'])} bf16 FLOP/s, running at {fmt(_p8['mfu'])} of peak throughout: "
            + "; ".join(f'"{n}" with {fmt(pp)} parameters on {fmt(t)} tokens' for n, pp, t in _p8["models"])
            + ". Ignoring attention dot products, give each run's training FLOPs and its length in days."
        ),
        params=_p8,
        row_order="8B, 70B, 405B.",
        fields=(
            FieldSpec("model", "string", "the model's name"),
            FieldSpec("train_flops", "number", "total training FLOPs"),
            FieldSpec("days", "number", "wall-clock days"),
        ),
        solve=sol.training_compute,
        slips=frozenset({"mac_as_one_flop"}),
    ),
    TaskSpec(
        number=9,
        category="flops",
        title="Parameters and per-token FLOPs of a grouped-query layer",
        chapter="transformers",
        tags=("transformers.param-count", "transformers.dot-flops"),
        question=(
            f"A transformer layer has {_layer_text(_p9)} (grouped-query attention, gated MLP). Give "
            "the parameter count of its attention projections, of its MLP and of the whole layer, and "
            "for each the forward and the training FLOPs per token, leaving out the attention dot "
            "products."
        ),
        params=_p9,
        row_order="attention_projections, mlp, layer.",
        fields=(
            FieldSpec("block", "string", '"attention_projections", "mlp" or "layer"'),
            FieldSpec("params", "integer", "parameters"),
            FieldSpec("forward_flops_per_token", "integer", "forward FLOPs per token"),
            FieldSpec("training_flops_per_token", "integer", "forward plus backward FLOPs per token"),
        ),
        solve=sol.layer_flops,
        slips=frozenset({"mac_as_one_flop"}),
    ),
    TaskSpec(
        number=10,
        category="flops",
        title="Parameter count of a full model, by component",
        chapter="applied-training",
        tags=("applied-training.counting", "transformers.param-count"),
        question=(
            f"A decoder-only model has L = {fmt(_p10['L'])} layers with {_layer_text(_p10)}, a "
            f"vocabulary of V = {fmt(_p10['V'])} and separate (untied) input embedding and output "
            "unembedding matrices, each of shape [V, D]. Give the parameter count of the embedding, of "
            "all attention projections, of all MLPs, of the unembedding and of the total, and each "
            "one's size in GiB when stored in bf16."
        ),
        params=_p10,
        row_order="embedding, attention, mlp, unembedding, total.",
        fields=(
            FieldSpec("component", "string", '"embedding", "attention", "mlp", "unembedding" or "total"'),
            FieldSpec("params", "integer", "parameters"),
            FieldSpec("bf16_gib", "number", "size in GiB at 2 bytes per parameter"),
        ),
        solve=sol.model_params,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=11,
        category="flops",
        title="Attention's share of a layer's FLOPs as the context grows",
        chapter="transformers",
        tags=("transformers.6nd", "transformers.dot-flops"),
        question=(
            f"A transformer layer has {_layer_text(_p11)} (multi-head attention: K = N). For a query "
            f"token attending to a context of S tokens, with S in {fmt_list(_p11['contexts'])}, give "
            "the forward FLOPs per token of the layer's weight matmuls (attention projections and MLP), "
            "the forward FLOPs per token of the attention dot products, and the attention dot "
            "products' fraction of the two together."
        ),
        params=_p11,
        row_order="one row per context length, in the order listed.",
        fields=(
            FieldSpec("seq_len", "integer", "the context length S"),
            FieldSpec("matmul_flops", "number", "weight-matmul FLOPs per token"),
            FieldSpec("attention_flops", "number", "attention dot-product FLOPs per token"),
            FieldSpec("attention_fraction", "number", "attention FLOPs over the sum of both"),
        ),
        solve=sol.attention_share,
        slips=frozenset({"mac_as_one_flop"}),
    ),
    TaskSpec(
        number=12,
        category="flops",
        title="Context lengths at which attention catches up with the matmuls",
        chapter="transformers",
        tags=("transformers.6nd", "transformers.param-count"),
        question=(
            "Three layer shapes, each with a gated MLP: "
            + "; ".join(
                f"{n} with D = {fmt(d)}, N = {fmt(nh)}, K = {fmt(k)}, H = {fmt(h)}, F = {fmt(f)}"
                for n, d, nh, k, h, f in _p12["models"]
            )
            + ". For each, give the context length S at which the attention dot-product FLOPs per "
            "token equal the attention projections' FLOPs per token, the S at which they equal the "
            "MLP's, and the S at which they equal both together."
        ),
        params=_p12,
        row_order="A, B, C.",
        fields=(
            FieldSpec("model", "string", "the layer's letter"),
            FieldSpec("seq_len_projections", "number", "S where attention equals the projections"),
            FieldSpec("seq_len_mlp", "number", "S where attention equals the MLP"),
            FieldSpec("seq_len_layer", "number", "S where attention equals projections plus MLP"),
        ),
        solve=sol.attention_crossover,
    ),
    TaskSpec(
        number=13,
        category="flops",
        title="Total versus active parameters of a mixture of experts",
        chapter="transformers",
        tags=("transformers.moe-remat", "transformers.param-count"),
        question=(
            f"A dense model has L = {fmt(_p13['L'])} layers with {_layer_text(_p13)} and a "
            f"vocabulary of V = {fmt(_p13['V'])} with untied embedding and unembedding matrices of "
            f"shape [V, D]. A mixture-of-experts variant replaces each MLP by {fmt(_p13['experts'])} "
            f"expert MLPs of the same shape, each token using {fmt(_p13['top_k'])} of them, chosen "
            "by a router that is a [D, E] matrix per layer (E experts). The embedding is a lookup and "
            "costs no FLOPs; every other parameter a token uses costs FLOPs. For both models give the "
            "total parameters, the parameters one token uses in matmuls, and the training FLOPs per "
            "token (attention dot products left out)."
        ),
        params=_p13,
        row_order="dense, moe.",
        fields=(
            FieldSpec("model", "string", '"dense" or "moe"'),
            FieldSpec("total_params", "integer", "all parameters"),
            FieldSpec("active_params", "integer", "parameters used in one token's matmuls"),
            FieldSpec("training_flops_per_token", "number", "training FLOPs per token"),
        ),
        solve=sol.moe_versus_dense,
        slips=frozenset({"mac_as_one_flop"}),
    ),
    TaskSpec(
        number=14,
        category="flops",
        title="The compute cost of rematerialization",
        chapter="transformers",
        tags=("transformers.moe-remat", "transformers.6nd"),
        question=(
            f"A model of P = {fmt(_p14['P'])} parameters with L = {fmt(_p14['L'])} layers of "
            f"{_layer_text(_p14)} is trained on T = {fmt(_p14['T'])} tokens using "
            f"{fmt(_p14['chips'])} chips of {fmt(_p14['peak'])} FLOP/s at {fmt(_p14['mfu'])} of "
            'peak. Three checkpointing policies: "none" (no recomputation), "full" (the whole '
            'forward pass is recomputed during the backward pass) and "attention_projections" (only '
            "the forward matmuls of the attention projections are recomputed). Attention dot "
            "products are left out. For each policy give the total FLOPs, the extra FLOPs as a "
            "fraction of the no-recomputation total, and the run's length in days."
        ),
        params=_p14,
        row_order="none, full, attention_projections.",
        fields=(
            FieldSpec("policy", "string", "the policy's name"),
            FieldSpec("train_flops", "number", "total FLOPs including recomputation"),
            FieldSpec("overhead_fraction", "number", "extra FLOPs over the no-recomputation FLOPs"),
            FieldSpec("days", "number", "wall-clock days"),
        ),
        solve=sol.rematerialization,
        slips=frozenset({"mac_as_one_flop"}),
    ),
]
