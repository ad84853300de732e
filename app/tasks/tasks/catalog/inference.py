"""Inference tasks: decode and prefill rooflines, quantized weights, sharded serving and cost."""

from __future__ import annotations

from typing import Any

from app.tasks.tasks.solutions import inference as sol
from app.tasks.tasks.spec import FieldSpec, TaskSpec, fmt, fmt_list

_p28: dict[str, Any] = {"bw": 1.6e12, "models": [("8B", 8e9), ("70B", 7e10), ("405B", 4.05e11)]}
_p29: dict[str, Any] = {
    "P": 8e9,
    "L": 32,
    "K": 8,
    "H": 128,
    "context": 4096,
    "peak": 9.89e14,
    "hbm": 3.35e12,
    "batches": [1, 16, 64, 256],
}
_p30: dict[str, Any] = {"peak": 9.18e14, "hbm": 1.64e12, "weights": ["bf16", "int8", "int4"]}
_p31: dict[str, Any] = {"P": 7e10, "chips": 8, "peak": 9.18e14, "hbm": 1.64e12, "prompts": [64, 512, 4096]}
_p32: dict[str, Any] = {"P": 7e10, "hbm_gib": 16, "bw": 8.2e11, "chips": [4, 8, 16, 32]}
_p33: dict[str, Any] = {
    "P": 7e10,
    "chips": 16,
    "peak": 1.97e14,
    "hbm": 8.2e11,
    "L": 80,
    "K": 8,
    "H": 128,
    "context": 512,
    "usd_per_chip_hour": 1.2,
    "batches": [1, 64, 512],
}
_p34: dict[str, Any] = {
    "P": 7e10,
    "L": 80,
    "N": 64,
    "K": 8,
    "H": 128,
    "chips": 8,
    "peak": 9.18e14,
    "dcn": 1.25e10,
    "prompts": [1024, 8192, 32768],
}

SPECS = [
    TaskSpec(
        number=28,
        category="inference",
        title="Batch-1 decode speed set by memory bandwidth",
        chapter="inference",
        tags=("inference.latency-throughput", "inference.prefill-decode"),
        question=(
            "Three dense models with bf16 weights generate text one token at a time with batch size 1: "
            + ", ".join(f'"{n}" with {fmt(pp)} parameters' for n, pp in _p28["models"])
            + f". The chips holding each model read HBM at {fmt(_p28['bw'])} bytes/s in total. "
            "Counting only the weight reads (every weight is read once per token; ignore the KV cache "
            "and compute), give the weights' size in GB, the time per generated token in "
            "milliseconds, and the tokens generated per second."
        ),
        params=_p28,
        row_order="8B, 70B, 405B.",
        fields=(
            FieldSpec("model", "string", "the model's name"),
            FieldSpec("weight_gb", "number", "bf16 weights in GB"),
            FieldSpec("step_ms", "number", "milliseconds per token"),
            FieldSpec("tokens_per_s", "number", "tokens per second"),
        ),
        solve=sol.decode_bandwidth_bound,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=29,
        category="inference",
        title="Decode step time with a KV cache as the batch grows",
        chapter="inference",
        tags=("inference.latency-throughput", "transformers.kv-cache"),
        question=(
            f"A model of {fmt(_p29['P'])} parameters with bf16 weights, L = {fmt(_p29['L'])} layers, "
            f"K = {fmt(_p29['K'])} key/value heads of size H = {fmt(_p29['H'])} and a bf16 KV cache "
            f"decodes on one chip ({fmt(_p29['peak'])} FLOP/s, {fmt(_p29['hbm'])} bytes/s of HBM). "
            f"Every sequence in the batch has {fmt(_p29['context'])} tokens cached. Each decode step "
            "reads all weights once and every sequence's cache once, and costs 2 FLOPs per parameter "
            "per sequence (ignore the attention FLOPs); memory and compute overlap. For batch sizes "
            f"{fmt_list(_p29['batches'])}, give the memory time, the compute time, the step time and "
            "the tokens generated per second."
        ),
        params=_p29,
        row_order="one row per batch size, in the order listed.",
        fields=(
            FieldSpec("batch", "integer", "batch size"),
            FieldSpec("memory_s", "number", "bytes read over bandwidth"),
            FieldSpec("compute_s", "number", "FLOPs over peak"),
            FieldSpec("step_s", "number", "the larger of the two"),
            FieldSpec("tokens_per_s", "number", "batch size over step time"),
        ),
        solve=sol.decode_batches,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=30,
        category="inference",
        title="Batch size at which decode becomes compute-bound, by weight precision",
        chapter="inference",
        tags=("inference.prefill-decode", "roofline.arithmetic-intensity"),
        question=(
            f"A chip has {fmt(_p30['peak'])} bf16 FLOP/s and {fmt(_p30['hbm'])} bytes/s of HBM "
            "bandwidth. A dense model decodes a batch of B sequences; each step reads every weight "
            "once and costs 2 FLOPs per parameter per sequence, computed in bf16 whatever the "
            "weights' storage (ignore the KV cache and activations). For weights stored as bf16, "
            "int8 and int4, give the bytes per parameter and the batch size B (not rounded) at "
            "which the step's arithmetic intensity equals the chip's."
        ),
        params=_p30,
        row_order="bf16, int8, int4.",
        fields=(
            FieldSpec("weights", "string", '"bf16", "int8" or "int4"'),
            FieldSpec("bytes_per_param", "number", "bytes per stored parameter"),
            FieldSpec("critical_batch", "number", "B where the intensities are equal"),
        ),
        solve=sol.decode_critical_batch,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=31,
        category="inference",
        title="Prefill: when a prompt becomes compute-bound",
        chapter="inference",
        tags=("inference.prefill-decode", "roofline.time-bounds"),
        question=(
            f"A model of {fmt(_p31['P'])} parameters with bf16 weights is split evenly across "
            f"{fmt(_p31['chips'])} chips, each with {fmt(_p31['peak'])} FLOP/s and {fmt(_p31['hbm'])} "
            "bytes/s of HBM; they work in parallel with no communication cost. Prefilling a prompt "
            "of T tokens costs 2 FLOPs per parameter per token (ignore attention) and reads every "
            "weight once (ignore the KV cache and activations); memory and compute overlap. For "
            f"T in {fmt_list(_p31['prompts'])}, give the compute time, the memory time, the prefill "
            "time and what bounds it."
        ),
        params=_p31,
        row_order="one row per prompt length, in the order listed.",
        fields=(
            FieldSpec("prompt_tokens", "integer", "T"),
            FieldSpec("compute_s", "number", "FLOPs per chip over peak"),
            FieldSpec("memory_s", "number", "weight bytes per chip over bandwidth"),
            FieldSpec("time_s", "number", "the larger of the two"),
            FieldSpec("bound", "string", '"compute" or "memory"'),
        ),
        solve=sol.prefill_roofline,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=32,
        category="inference",
        title="Sharding a model's weights for batch-1 latency",
        chapter="inference",
        tags=("inference.sharding", "inference.latency-throughput"),
        question=(
            f"A model of {fmt(_p32['P'])} parameters with bf16 weights is split evenly across n chips, "
            f"each with {fmt(_p32['hbm_gib'])} GiB of HBM read at {fmt(_p32['bw'])} bytes/s; all chips "
            "read their share of the weights in parallel for every generated token (batch size 1; "
            f"ignore the KV cache, compute and communication). For n in {fmt_list(_p32['chips'])}, "
            "give the GiB of weights per chip, whether they fit in a chip's HBM, the time per token "
            "in milliseconds and the tokens per second."
        ),
        params=_p32,
        row_order="one row per chip count, in the order listed.",
        fields=(
            FieldSpec("chips", "integer", "n"),
            FieldSpec("weights_gib_per_chip", "number", "GiB of weights on each chip"),
            FieldSpec("fits", "boolean", "whether that is at most the chip's HBM"),
            FieldSpec("step_ms", "number", "milliseconds per token"),
            FieldSpec("tokens_per_s", "number", "tokens per second"),
        ),
        solve=sol.sharded_latency,
        slips=frozenset({"bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=33,
        category="inference",
        title="Serving cost per million tokens as the batch grows",
        chapter="applied-inference",
        tags=("applied-inference.serving", "inference.latency-throughput"),
        question=(
            f"A model of {fmt(_p33['P'])} parameters (bf16 weights; L = {fmt(_p33['L'])} layers, "
            f"K = {fmt(_p33['K'])} key/value heads of size H = {fmt(_p33['H'])}, bf16 KV cache) is "
            f"served on {fmt(_p33['chips'])} chips, each with {fmt(_p33['peak'])} FLOP/s and "
            f"{fmt(_p33['hbm'])} bytes/s of HBM, splitting weights, caches and FLOPs evenly with no "
            f"communication cost. Every sequence has {fmt(_p33['context'])} tokens cached. A decode "
            "step reads all weights and caches once and costs 2 FLOPs per parameter per sequence "
            "(ignore attention FLOPs); memory and compute overlap. A chip costs "
            f"{fmt(_p33['usd_per_chip_hour'])} US dollars per hour. For batch sizes "
            f"{fmt_list(_p33['batches'])}, give the step time in milliseconds, the tokens generated "
            "per second by all chips together, and the dollars per million generated tokens."
        ),
        params=_p33,
        row_order="one row per batch size, in the order listed.",
        fields=(
            FieldSpec("batch", "integer", "batch size"),
            FieldSpec("step_ms", "number", "milliseconds per decode step"),
            FieldSpec("tokens_per_s", "number", "tokens per second, all chips"),
            FieldSpec("usd_per_million_tokens", "number", "dollars per million tokens"),
        ),
        solve=sol.serving_cost,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
    TaskSpec(
        number=34,
        category="inference",
        title="Moving the KV cache from prefill to decode servers",
        chapter="inference",
        tags=("inference.engine", "transformers.kv-cache"),
        question=(
            f"In disaggregated serving, a model of {fmt(_p34['P'])} parameters (L = {fmt(_p34['L'])} "
            f"layers, N = {fmt(_p34['N'])} query heads, K = {fmt(_p34['K'])} key/value heads of size "
            f"H = {fmt(_p34['H'])}, bf16 KV cache) prefills a prompt on {fmt(_p34['chips'])} chips of "
            f"{fmt(_p34['peak'])} FLOP/s each, at peak and with the work split evenly. The prompt's KV "
            f"cache is then sent to the decode servers, each of the {fmt(_p34['chips'])} chips sending "
            f"its share at {fmt(_p34['dcn'])} bytes/s. Prefill costs 2 FLOPs per parameter per prompt "
            "token plus the attention dot products, in which every prompt token attends to the whole "
            f"prompt. For prompts of {fmt_list(_p34['prompts'])} tokens, give the KV cache's size in "
            "bytes, the prefill time, the transfer time and the transfer time as a fraction of the "
            "prefill time."
        ),
        params=_p34,
        row_order="one row per prompt length, in the order listed.",
        fields=(
            FieldSpec("prompt_tokens", "integer", "prompt length"),
            FieldSpec("kv_bytes", "number", "the prompt's KV cache in bytes"),
            FieldSpec("prefill_s", "number", "prefill time"),
            FieldSpec("transfer_s", "number", "KV transfer time"),
            FieldSpec("transfer_fraction", "number", "transfer time over prefill time"),
        ),
        solve=sol.disaggregated_transfer,
        slips=frozenset({"mac_as_one_flop", "bf16_as_one_byte"}),
    ),
]
