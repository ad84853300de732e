"""Memory tasks: optimizer state, chips needed, sharded state, KV cache, checkpoints, serving."""

from __future__ import annotations

from typing import Any

from app.tasks.tasks.solutions import memory as sol
from app.tasks.tasks.spec import FieldSpec, TaskSpec, fmt, fmt_list

_p15: dict[str, Any] = {"P": 7e10}
_p16: dict[str, Any] = {"hbm_gib": 96, "models": [("7B", 7e9), ("70B", 7e10), ("405B", 4.05e11)]}
_p17: dict[str, Any] = {
    "P": 7e10,
    "hbm_gib": 96,
    "cases": [("zero1", 16), ("zero1", 64), ("zero2", 16), ("zero2", 64), ("fsdp", 16), ("fsdp", 64)],
}
_p18: dict[str, Any] = {"L": 80, "H": 128, "S": 8192, "batch": 16, "variants": [("MHA", 64), ("GQA", 8), ("MQA", 1)]}
_p19: dict[str, Any] = {"L": 80, "D": 8192, "hbm_gib": 96, "tokens": [4096, 16384, 65536]}
_p20: dict[str, Any] = {
    "P": 7e10,
    "chips": 16,
    "hbm_gib": 16,
    "L": 80,
    "K": 8,
    "H": 128,
    "contexts": [2048, 8192, 32768],
}

SPECS = [
    TaskSpec(
        number=15,
        category="memory",
        title="Weights, gradients and Adam state of a 70B model",
        chapter="training",
        tags=("training.memory",),
        question=(
            f"A model of {fmt(_p15['P'])} parameters is trained with Adam in mixed precision. Give the "
            "bytes per parameter and the total GiB of its weights, its gradients, its Adam state and "
            "all three together, and each as a multiple of the weights' bytes."
        ),
        params=_p15,
        row_order="weights, gradients, adam_state, total.",
        fields=(
            FieldSpec("component", "string", '"weights", "gradients", "adam_state" or "total"'),
            FieldSpec("bytes_per_param", "number", "bytes per parameter"),
            FieldSpec("gib", "number", "total size in GiB"),
            FieldSpec(
                "multiple_of_weights", "number", "bytes per parameter over the weights' bytes per parameter"
            ),
        ),
        solve=sol.adam_breakdown,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=16,
        category="memory",
        title="Chips needed just to hold the training state",
        chapter="training",
        tags=("training.memory", "applied-training.counting"),
        question=(
            "Three models are trained with Adam in mixed precision: "
            + ", ".join(f'"{n}" with {fmt(pp)} parameters' for n, pp in _p16["models"])
            + f". Each chip has {fmt(_p16['hbm_gib'])} GiB of HBM. Ignoring activations, give each "
            "model's weights, gradients and Adam state together in GiB and the smallest number of "
            "chips whose HBM can hold them."
        ),
        params=_p16,
        row_order="7B, 70B, 405B.",
        fields=(
            FieldSpec("model", "string", "the model's name"),
            FieldSpec("total_gib", "number", "weights, gradients and Adam state in GiB"),
            FieldSpec("chips", "integer", "smallest chip count that holds them"),
        ),
        solve=sol.chips_to_hold,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=17,
        category="memory",
        title="Per-chip training state under ZeRO-1, ZeRO-2 and FSDP",
        chapter="training",
        tags=("training.memory", "training.data-parallel"),
        question=(
            f"A model of {fmt(_p17['P'])} parameters is trained with Adam in mixed precision on chips "
            f'of {fmt(_p17["hbm_gib"])} GiB each. Under "zero1" only the Adam state is split evenly '
            'across the chips (weights and gradients are replicated); under "zero2" the Adam state and '
            'the gradients are split; under "fsdp" weights, gradients and Adam state are all split. '
            "Ignoring activations, give the GiB each chip holds and whether that fits in its HBM, for "
            "each scheme on 16 and on 64 chips."
        ),
        params=_p17,
        row_order="zero1 on 16, zero1 on 64, zero2 on 16, zero2 on 64, fsdp on 16, fsdp on 64.",
        fields=(
            FieldSpec("scheme", "string", '"zero1", "zero2" or "fsdp"'),
            FieldSpec("chips", "integer", "number of chips"),
            FieldSpec("per_chip_gib", "number", "GiB held by each chip"),
            FieldSpec("fits", "boolean", "whether it is at most the chip's HBM"),
        ),
        solve=sol.sharded_state,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=18,
        category="memory",
        title="KV cache size with multi-head, grouped-query and multi-query attention",
        chapter="transformers",
        tags=("transformers.kv-cache", "inference.memory"),
        question=(
            f"A model has L = {fmt(_p18['L'])} layers, 64 query heads of size H = {fmt(_p18['H'])}, and "
            f"a bf16 KV cache. A batch of {fmt(_p18['batch'])} sequences of {fmt(_p18['S'])} tokens each "
            "is cached. Three variants differ only in their key/value heads: "
            + ", ".join(f'"{n}" with K = {k}' for n, k in _p18["variants"])
            + ". Give each variant's KV bytes per token (all layers) and the whole batch's cache in GiB."
        ),
        params=_p18,
        row_order="MHA, GQA, MQA.",
        fields=(
            FieldSpec("config", "string", "the variant's name"),
            FieldSpec("kv_heads", "integer", "K"),
            FieldSpec("bytes_per_token", "number", "KV bytes per token over all layers"),
            FieldSpec("cache_gib", "number", "cache of the whole batch in GiB"),
        ),
        solve=sol.kv_cache_variants,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=19,
        category="memory",
        title="Memory of layer-input checkpoints",
        chapter="transformers",
        tags=("training.memory",),
        question=(
            f"A model of L = {fmt(_p19['L'])} layers and width D = {fmt(_p19['D'])} is trained with "
            "checkpointing that keeps only each layer's bf16 input activations of shape [tokens, D] "
            f"for the backward pass. Each chip has {fmt(_p19['hbm_gib'])} GiB of HBM. For "
            f"{fmt_list(_p19['tokens'])} tokens per chip, give the checkpoints' size in GiB and "
            "their fraction of the chip's HBM."
        ),
        params=_p19,
        row_order="one row per token count, in the order listed.",
        fields=(
            FieldSpec("tokens_per_chip", "integer", "tokens per chip"),
            FieldSpec("checkpoint_gib", "number", "checkpoints in GiB"),
            FieldSpec("fraction_of_hbm", "number", "checkpoint bytes over HBM bytes"),
        ),
        solve=sol.checkpoint_memory,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=20,
        category="memory",
        title="Largest serving batch that fits beside the weights",
        chapter="inference",
        tags=("inference.memory", "transformers.kv-cache"),
        question=(
            f"A model of {fmt(_p20['P'])} parameters is served with bf16 weights spread over "
            f"{fmt(_p20['chips'])} chips of {fmt(_p20['hbm_gib'])} GiB of HBM each. It has "
            f"L = {fmt(_p20['L'])} layers, K = {fmt(_p20['K'])} key/value heads of size "
            f"H = {fmt(_p20['H'])} and a bf16 KV cache. All HBM not taken by the weights holds KV "
            f"cache (nothing else). For contexts of {fmt_list(_p20['contexts'])} tokens per sequence, "
            "give one sequence's KV cache in GiB and the largest number of such sequences that fit."
        ),
        params=_p20,
        row_order="one row per context length, in the order listed.",
        fields=(
            FieldSpec("context_len", "integer", "tokens per sequence"),
            FieldSpec("kv_gib_per_sequence", "number", "one sequence's KV cache in GiB"),
            FieldSpec("max_batch", "integer", "largest number of sequences that fit"),
        ),
        solve=sol.serving_batch,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
]
