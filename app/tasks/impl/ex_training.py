"""Training and inference accounting: 6ND, the FSDP/TP split, the KV cache."""

from __future__ import annotations

import random

from app.tasks.impl import reference as ref
from app.tasks.impl.spec import Case, Exercise, distinct


def _training_case(rng: random.Random, i: int) -> Case:
    args = (rng.uniform(1e8, 1e12), rng.uniform(1e10, 3e13), rng.randint(8, 16384),
            rng.uniform(1e14, 3e15), rng.uniform(0.2, 0.7))
    return Case(args, ref.training_cost(*args))


def _training_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _training_case, 6)


# FSDP and TP axis counts follow a fixed pattern (equal and unequal both occur in every draw);
# the sizes are drawn.
_AXES = ((1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (1, 3))


def _optimal_x_case(rng: random.Random, i: int) -> Case:
    args = (rng.randint(10_000, 5_000_000), rng.randint(4096, 65536), 2 ** rng.randint(4, 14), *_AXES[i])
    return Case(args, ref.fsdp_tp_optimal_x(*args))


def _optimal_x_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _optimal_x_case, len(_AXES))


def _plan_case(rng: random.Random, i: int) -> Case:
    args = (rng.randint(4096, 2_000_000), 128 * rng.randint(8, 128), 128 * rng.randint(32, 512),
            2 ** rng.randint(2, 11), rng.uniform(2e10, 2e11), rng.uniform(1e14, 3e15), rng.choice([1, 2]), 1)
    return Case(args, ref.fsdp_tp_plan(*args))


def _plan_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _plan_case, 6)


def _kv_case(rng: random.Random, i: int) -> Case:
    args = (rng.randint(1, 256), rng.randint(128, 131072), rng.randint(1, 128), rng.randint(1, 16),
            rng.choice([64, 80, 96, 128, 256]), rng.choice([1, 2, 4]))
    return Case(args, ref.kv_cache_bytes(*args))


def _kv_cases(rng: random.Random) -> list[Case]:
    return distinct(rng, _kv_case, 6)


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
