"""Training and inference accounting: 6ND, the FSDP/TP split, the KV cache."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise


def _training_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(6):
        args = (rng.choice([1.3e9, 8e9, 7e10, 4.05e11]), rng.choice([1e11, 2e12, 1.5e13]),
                rng.choice([256, 2048, 8960]), rng.choice([4.59e14, 9.89e14]), rng.choice([0.3, 0.4, 0.55]))
        cases.append(Case(args, ref.training_cost(*args)))
    return cases


def _optimal_x_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(6):
        args = (rng.choice([48_000, 1_000_000, 4_190_000]), rng.choice([14336, 28672, 53248]),
                rng.choice([64, 256, 2048, 8960]), rng.choice([1, 2]), rng.choice([1, 2]))
        cases.append(Case(args, ref.fsdp_tp_optimal_x(*args)))
    return cases


def _plan_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(6):
        args = (rng.choice([16_384, 131_072, 1_048_576]), rng.choice([4096, 8192, 16384]),
                rng.choice([16384, 28672, 53248]), rng.choice([16, 64, 256, 1024]),
                rng.choice([4.5e10, 9e10]), rng.choice([4.59e14, 9.18e14]), rng.choice([1, 2]), 1)
        cases.append(Case(args, ref.fsdp_tp_plan(*args)))
    return cases


def _kv_cases(rng: random.Random) -> list[Case]:
    cases = []
    for _ in range(6):
        args = (rng.choice([1, 8, 32, 128]), rng.choice([2048, 8192, 32768, 131072]),
                rng.choice([32, 80, 126]), rng.choice([1, 8, 16]), rng.choice([64, 128]), rng.choice([1, 2]))
        cases.append(Case(args, ref.kv_cache_bytes(*args)))
    return cases


EXERCISES = [
    Exercise(
        name="training_cost",
        title="FLOPs and wall time of a training run",
        chapter="transformers",
        tags=("transformers.6nd", "applied-training.counting"),
        entry="training_cost",
        signature="def training_cost(n_params: float, n_tokens: float, n_chips: int, peak_flops: float,\n"
        "                  mfu: float) -> dict:",
        statement="""
A dense transformer with `n_params` parameters is trained on `n_tokens` tokens on `n_chips` chips,
each with `peak_flops` FLOPs/s, at model FLOPs utilisation `mfu`. Counting the usual matmul FLOPs of
the forward and backward passes (attention FLOPs ignored), return a dict with `"flops"`, the total
training FLOPs, and `"seconds"`, the wall-clock time.""",
        generate=_training_cases,
    ),
    Exercise(
        name="fsdp_tp_optimal_x",
        title="Optimal amount of FSDP when mixing FSDP and tensor parallelism",
        chapter="training",
        tags=("training.mixed",),
        entry="fsdp_tp_optimal_x",
        signature="def fsdp_tp_optimal_x(batch: float, ffw: float, n_chips: int, fsdp_axes: int,\n"
        "                      tp_axes: int) -> float:",
        statement="""
A training step shards the batch over X chips (FSDP) and the model over Y chips (tensor parallelism),
with X * Y = `n_chips`. FSDP communication runs over `fsdp_axes` mesh axes and tensor-parallel
communication over `tp_axes`; `batch` is the global batch in tokens and `ffw` the MLP hidden size.
Model only the forward pass, let FSDP and TP communication overlap each other, and allow X to be any
positive real. Return the X that minimises communication time.""",
        generate=_optimal_x_cases,
    ),
    Exercise(
        name="fsdp_tp_plan",
        title="Choosing an integer FSDP x TP split and checking it is compute-bound",
        chapter="training",
        tags=("training.mixed", "training.tensor-parallel", "training.fsdp"),
        entry="fsdp_tp_plan",
        signature="def fsdp_tp_plan(batch: float, d_model: int, ffw: int, n_chips: int,\n"
        "                 ici_bandwidth: float, peak_flops: float, fsdp_axes: int,\n"
        "                 tp_axes: int) -> dict:",
        statement="""
Model one MLP layer's forward pass (an up and a down projection of sizes `d_model` x `ffw`, 2-byte
values) on `n_chips` chips split as X (FSDP) times Y (tensor parallelism). Per step, FSDP all-gathers
the weights, taking 4 * d_model * ffw / (Y * ici_bandwidth * fsdp_axes) seconds, and tensor
parallelism all-gathers activations, taking 4 * batch * d_model / (X * ici_bandwidth * tp_axes)
seconds; the two overlap, so communication takes the larger. The matmuls take
4 * batch * d_model * ffw / (n_chips * peak_flops) seconds. Over every integer factorisation
X * Y = n_chips, pick the X with the least communication time (the largest X on a tie) and return a
dict with `"x"`, `"y"`, `"comms_seconds"`, `"math_seconds"` and `"compute_bound"` (communication
strictly shorter than the math).""",
        generate=_plan_cases,
    ),
    Exercise(
        name="kv_cache_bytes",
        title="Size of a KV cache",
        chapter="inference",
        tags=("transformers.kv-cache", "inference.memory"),
        entry="kv_cache_bytes",
        signature="def kv_cache_bytes(batch: int, seq_len: int, n_layers: int, n_kv_heads: int,\n"
        "                   head_dim: int, bytes_per_element: int) -> int:",
        statement="""
Return the number of bytes of the key-value cache that a decoder-only transformer with grouped-query
attention keeps for `batch` sequences of `seq_len` tokens: `n_layers` layers, each caching keys and
values for `n_kv_heads` KV heads of dimension `head_dim`, at `bytes_per_element` bytes each.""",
        generate=_kv_cases,
    ),
]
