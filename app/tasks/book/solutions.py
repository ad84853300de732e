"""A solution for every numeric book question: the answer computed from the data the question
(with its context, its hardware rows and the assumptions its prompt states) gives, the way the
exam's oracles compute theirs.

Each solution returns the required values in the annotation's order, in base units (seconds,
bytes, FLOPs, FLOP/s, bytes/s; fractions for percentages; counts as plain numbers). The
hardware figures are the book's spec-table rows shown with the prompt (app/tasks/hardware.py).

The computed value is the key. The book's printed figure is accepted beside it only where it
lies outside the split's tolerance of the computed value (a rounding or a slip in the book);
the annotation then says why (``differs``). No tolerance is ever widened around one value."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.tasks import formulas as fm
from app.tasks.hardware import CHIPS

Solution = Callable[[], tuple[float, ...]]

SOLUTIONS: dict[str, Solution] = {}



def _required(value: float | None, what: str) -> float:
    if value is None:
        raise ValueError(f"the spec table has no {what}")
    return value


@dataclass(frozen=True, slots=True)
class _TpuFigures:
    """A TPU's spec row with the figures the solutions read made required: ChipSpec leaves them
    optional for GPUs, but every TPU row in the book's tables has them."""

    hbm_bytes: float
    hbm_bandwidth: float
    bf16_flops: float
    int8_flops: float
    ici_bandwidth_bidi: float
    ici_bandwidth_oneway: float

    @classmethod
    def of(cls, name: str) -> _TpuFigures:
        c = CHIPS[name]
        return cls(
            c.hbm_bytes, c.hbm_bandwidth, _required(c.bf16_flops, f"{name} bf16 FLOP/s"),
            _required(c.int8_flops, f"{name} int8 OP/s"), _required(c.ici_bandwidth_bidi, f"{name} ICI bandwidth"),
            _required(c.ici_bandwidth_oneway, f"{name} one-way ICI bandwidth"),
        )


V5E, V5P, V4P, V6E = (_TpuFigures.of(name) for name in ("TPU v5e", "TPU v5p", "TPU v4p", "TPU v6e"))
# A TPU v5e slice is a 2D grid of 1, 4 (2x2), 8 (2x4), 16 (4x4), 32 (4x8)... chips.
V5E_SLICES = (1, 4, 8, 16, 32, 64, 128, 256)
KIB = 1024


def solves(key: str) -> Callable[[Solution], Solution]:
    def register(fn: Solution) -> Solution:
        if key in SOLUTIONS:
            raise ValueError(f"two solutions for {key}")
        SOLUTIONS[key] = fn
        return fn

    return register


def smallest_v5e_slice(chips_needed: float) -> int:
    return next(n for n in V5E_SLICES if n >= chips_needed)


# ---- roofline ------------------------------------------------------------------------------


@solves("roofline.q1")
def _() -> tuple[float, ...]:
    intensity = 3.94e14 / 8.1e11  # int8 OP/s over HBM bytes/s, as the question states
    return intensity, intensity / 2  # int8 weights and activations: 2B OPs per DF bytes


@solves("roofline.q2")
def _() -> tuple[float, ...]:
    # bf16 FLOPs over int8 weights: 2BDF FLOPs per DF bytes, so B > (C / W) / 2.
    return (fm.critical_batch(1.97e14, 8.1e11, 1),)


@solves("roofline.q4")
def _() -> tuple[float, ...]:
    b, d, f = 1, 1e9, 1e9  # the large-D, F limit of 2BDF / (BD + BDF + BF) in int8
    return (fm.intensity(2 * b * d * f, b * d + b * d * f + b * f),)


@solves("roofline.q5")
def _() -> tuple[float, ...]:
    dense_bf16 = 1.979e15 / 2  # the spec sheet's sparse figure, halved
    return (dense_bf16 / 3.35e12,)


# ---- tpus ----------------------------------------------------------------------------------


@solves("tpus.q1")
def _() -> tuple[float, ...]:
    return (fm.comms_time(2 * 200e9 / 32, V4P.hbm_bandwidth),)


@solves("tpus.q2")
def _() -> tuple[float, ...]:
    v5e_chips, v5p_chips = 16 * 16, 16 * 20 * 28
    return (
        v5e_chips / 8, v5e_chips * 1, v5e_chips * V5E.bf16_flops, v5e_chips * V5E.hbm_bytes,
        v5p_chips / 4, v5p_chips * 2, v5p_chips * V5P.bf16_flops, v5p_chips * V5P.hbm_bytes,
    )  # hosts hold 4x2 v5e or 2x2x1 v5p chips; a v5e has one TensorCore, a v5p two


@solves("tpus.q3")
def _() -> tuple[float, ...]:
    # With B << D and F = 4D: 8BD^2 / C > 8D^2 / W_pcie.
    return (V6E.bf16_flops / 1.5e10,)


@solves("tpus.q4")
def _() -> tuple[float, ...]:
    d, f = 4096, 16384
    flops_per_b = 2 * d * f / V5E.int8_flops

    def threshold(bw: float) -> float:
        # int8 throughout: T_comms = (DF + BD + BF) / bw, T_math = 2BDF / C_int8.
        return (d * f / bw) / (flops_per_b - (d + f) / bw)

    return threshold(V5E.hbm_bandwidth), threshold(22 * V5E.hbm_bandwidth)


@solves("tpus.q5")
def _() -> tuple[float, ...]:
    nbytes = 2 * 8 * 128 * 8192
    hops = 3 + 3  # no wraparound on a 4x4 v5e: (0,0) to (3,3) is six hops
    return hops * 1e-6, nbytes / (2 * V5E.ici_bandwidth_oneway)  # sent along both axes at once


@solves("tpus.q6")
def _() -> tuple[float, ...]:
    nbytes = (128 * 1024) ** 2  # int8
    pcie = nbytes / 16 / 1.5e10  # each chip loads its 1/16 over its own PCIe link
    ici = nbytes * 15 / 16 / (2 * V5E.ici_bandwidth_oneway)  # TPU{0,0} receives on 2 links
    hbm = nbytes / V5E.hbm_bandwidth
    flops = fm.compute_time(fm.matmul_flops(8, 128 * 1024, 128 * 1024), V5E.bf16_flops)
    return (max(pcie, ici, hbm, flops),)  # stages overlap perfectly: the slowest sets the time


@solves("tpus.q7")
def _() -> tuple[float, ...]:
    return (8 * 128 * 4 * 2 * 1.75e9,)  # (8, 128) lanes x 4 ALUs, two TensorCores, per cycle


# ---- sharding ------------------------------------------------------------------------------


@solves("sharding.q1")
def _() -> tuple[float, ...]:
    per_device = 4 * 1024 * 4096 / (8 * 2)
    return per_device, per_device / 3.4e12


@solves("sharding.q2")
def _() -> tuple[float, ...]:
    per_device = 128 * 2048 / (2 * 8)
    return per_device, per_device * 32


@solves("sharding.q3")
def _() -> tuple[float, ...]:
    shard = 2048 / 4 * 8192 * 2
    # No wraparound on a 4-chip v5e axis: edge shards cross 3 links one way.
    bandwidth_bound = 3 * shard / V5E.ici_bandwidth_oneway
    small_hops = 3 * 1e-6  # 64 x 256 bf16 shards are latency-bound: 3 hops of ~1 us
    return bandwidth_bound, small_hops


@solves("sharding.q4")
def _() -> tuple[float, ...]:
    return (8 * 2,)  # replicated over Y and Z


@solves("sharding.q5")
def _() -> tuple[float, ...]:
    b, d, w = 1024, 4096, V4P.ici_bandwidth_bidi
    return 2 * b * d / (w * 4), 2 * b * d / (2 * w), 2 * (2 * b * d / (4 * 4)) / w


@solves("sharding.q6")
def _() -> tuple[float, ...]:
    return (4 / 2 * 1e-6,)  # a wraparound axis of 4: 2 hops of ~1 us each


# ---- transformers --------------------------------------------------------------------------


@solves("transformers.q1")
def _() -> tuple[float, ...]:
    d, layers, vocab = 4096, 64, 32000
    f = 4 * d
    attention = 4 * d * d  # N H = D: Q, K, V and O
    total = layers * (3 * d * f + attention + d) + 2 * d * vocab
    kv_per_token = 2 * layers * d * 1  # MHA, int8
    return total, attention / (attention + 3 * d * f), kv_per_token


@solves("transformers.q7")
def _() -> tuple[float, ...]:
    used = fm.training_flops(37e9, 14.8e12)
    available = 2.79e6 * 3600 * 1.513e15  # the dense FP8 peak the prompt states
    return (used / available,)


@solves("transformers.q8")
def _() -> tuple[float, ...]:
    # int8 weights, bf16 FLOPs on a v5e: 2kBDF / EDF > C / W, so B > (C / W) / 2 * E / k.
    return (V5E.bf16_flops / V5E.hbm_bandwidth / 2 * 256 / 8,)


# ---- training ------------------------------------------------------------------------------

LLAMA2_13B = {"layers": 40, "d": 5120, "f": 13824, "n_heads": 40, "n_kv": 40, "head_dim": 128, "vocab": 32000}


@solves("training.q1")
def _() -> tuple[float, ...]:
    return (fm.dense_params(**LLAMA2_13B),)


@solves("training.q2")
def _() -> tuple[float, ...]:
    params = 13e9
    optimizer = (2 + 4 + 4) * params  # bf16 weights, two fp32 Adam moments
    m = LLAMA2_13B
    activations = 2 * m["layers"] * 16e6 * (m["d"] + 2 * m["f"])  # bf16, after the 3 matmuls
    return optimizer, activations


# ---- applied-training ----------------------------------------------------------------------

LLAMA3_70B = {"layers": 80, "d": 8192, "f": 28672, "n_heads": 64, "n_kv": 8, "head_dim": 128, "vocab": 128256}


@solves("applied-training.q1")
def _() -> tuple[float, ...]:
    return (fm.dense_params(**LLAMA3_70B),)


@solves("applied-training.q2")
def _() -> tuple[float, ...]:
    return (fm.training_flops(70e9, 1),)


@solves("applied-training.q3")
def _() -> tuple[float, ...]:
    return (fm.training_flops(70e9, 15e12),)


@solves("applied-training.q4")
def _() -> tuple[float, ...]:
    return (fm.training_time(70e9, 15e12, 8960, V5P.bf16_flops, 0.4),)


def _llama3_training_memory() -> float:
    params = 70e9
    checkpoints = 2 * 8192 * 4e6 * 4 * 80  # bf16 [B, D] saved 4 times per layer
    return 2 * params + 8 * params + checkpoints


@solves("applied-training.q5")
def _() -> tuple[float, ...]:
    return (math.ceil(_llama3_training_memory() / V5P.hbm_bytes),)


@solves("applied-training.q6")
def _() -> tuple[float, ...]:
    return (_llama3_training_memory() / 8960,)


# ---- inference -----------------------------------------------------------------------------

# The model of the inference chapter's problems: L=64, D=4096, F=16384, N=32, K=8, H=256,
# V=32128, input and output embeddings shared.
INF = {"layers": 64, "d": 4096, "f": 16384, "n": 32, "k": 8, "h": 256, "v": 32128}


def _inference_params(experts: int = 1) -> float:
    m = INF
    return m["layers"] * m["d"] * (3 * experts * m["f"] + 2 * m["h"] * (m["n"] + m["k"])) + m["d"] * m["v"]


@solves("inference.q1")
def _() -> tuple[float, ...]:
    chips, params, kv_per_seq = 16, 30e9, 100e3 * 8192
    bw, peak = chips * V5E.hbm_bandwidth, chips * V5E.bf16_flops

    def step(batch: int) -> float:
        # The chapter's step model: KV loading, plus the larger of weight loading and MLP FLOPs.
        return batch * kv_per_seq / bw + max(params / bw, 2 * batch * params / peak)

    return step(4), step(256)


@solves("inference.q2")
def _() -> tuple[float, ...]:
    return _inference_params(), fm.kv_cache_bytes(1, INF["layers"], INF["k"], INF["h"], 1)


@solves("inference.q3")
def _() -> tuple[float, ...]:
    free = 16 * V5E.hbm_bytes - _inference_params()  # int8 weights on a 4x4
    per_seq = fm.kv_cache_bytes(128_000, INF["layers"], INF["k"], INF["h"], 1)
    return math.floor(free / per_seq), math.floor(free / (per_seq / INF["k"]))


@solves("inference.q4")
def _() -> tuple[float, ...]:
    return (fm.comms_time(_inference_params(), 16 * V5E.hbm_bandwidth),)


@solves("inference.q6")
def _() -> tuple[float, ...]:
    total = _inference_params(16)
    m = INF
    activated = m["layers"] * m["d"] * (3 * 2 * m["f"] + 2 * m["h"] * (m["n"] + m["k"])) + m["d"] * m["v"]
    batch = V5E.bf16_flops / V5E.hbm_bandwidth * 16 / 2  # bf16: E / k times the dense threshold
    return total, activated, batch


# ---- applied-inference ---------------------------------------------------------------------

LLAMA3_KV_INT8 = fm.kv_cache_bytes(1, 80, 8, 128, 1)
DECODE_STEP, DECODE_BATCH, DECODE_LENGTH, PREFILL = 0.019, 43, 512, 0.91


@solves("applied-inference.q1")
def _() -> tuple[float, ...]:
    return (fm.kv_cache_bytes(1, 80, 8, 128, 1),)  # one token: keys and values, 80 layers, 8 KV heads


@solves("applied-inference.q2")
def _() -> tuple[float, ...]:
    total = 70e9 + LLAMA3_KV_INT8 * 8192 * 32  # int8 parameters and KV caches
    return total, smallest_v5e_slice(total / V5E.hbm_bytes)


@solves("applied-inference.q3")
def _() -> tuple[float, ...]:
    total = 70e9 + LLAMA3_KV_INT8 * 8192 * 32
    step = fm.decode_step_time(total, 0, 8, V5E.hbm_bandwidth)  # memory-bound at batch 32
    return step, 32 / step / 8, fm.decode_step_time(total, 0, 16, V5E.hbm_bandwidth)


@solves("applied-inference.q4")
def _() -> tuple[float, ...]:
    return (
        fm.critical_batch(V5E.bf16_flops, V5E.hbm_bandwidth, 2),
        fm.critical_batch(V5E.bf16_flops, V5E.hbm_bandwidth, 1),
        fm.critical_batch(V5E.int8_flops, V5E.hbm_bandwidth, 1),
    )


@solves("applied-inference.q5")
def _() -> tuple[float, ...]:
    return tuple(smallest_v5e_slice(70e9 * size / V5E.hbm_bytes) for size in (2, 1, 0.5))


@solves("applied-inference.q6")
def _() -> tuple[float, ...]:
    return (fm.comms_time(V5E.hbm_bytes, V5E.hbm_bandwidth),)  # a full HBM streamed per step


@solves("applied-inference.q7")
def _() -> tuple[float, ...]:
    per_second = DECODE_BATCH / (DECODE_STEP * DECODE_LENGTH)
    return tuple(per_second / n for n in (16, 8, 4))


@solves("applied-inference.q8")
def _() -> tuple[float, ...]:
    kv_per_seq = fm.kv_cache_bytes(1, 80, 8, 128, 2) * 8192  # bf16 KV caches
    batch = math.floor((32 * V5E.hbm_bytes - 2 * 70e9) / kv_per_seq)  # beside bf16 weights on a 4x8
    per_second = batch / (DECODE_STEP * DECODE_LENGTH)
    return tuple(per_second / n for n in (32, 16, 8))


@solves("applied-inference.q10")
def _() -> tuple[float, ...]:
    return (fm.inference_flops(70e9, 8192) / (16 * V5E.bf16_flops * 0.4),)


@solves("applied-inference.q11")
def _() -> tuple[float, ...]:
    batch, prefill, generate = 32, 8192, 4096
    return batch / generate, batch * (prefill + generate) / generate


@solves("applied-inference.q12")
def _() -> tuple[float, ...]:
    # P / prefill = B G / (step * decode length)  =>  P / G = B * prefill / (step * length)
    return (DECODE_BATCH * PREFILL / (DECODE_STEP * DECODE_LENGTH),)


# ---- gpus ----------------------------------------------------------------------------------


@solves("gpus.q1")
def _() -> tuple[float, ...]:
    return 132 * 4 * 32, 148 * 4 * 32, 2 * 4 * 8 * 128


@solves("gpus.q2")
def _() -> tuple[float, ...]:
    cores = 132 * 4 * 32
    return cores * 1.59e9, cores * 1.98e9


@solves("gpus.q3")
def _() -> tuple[float, ...]:
    h100, b200 = 990e12 / 3.35e12, 2250e12 / 8e12  # the spec-sheet figures the prompt states
    return h100, b200, 2 * h100, 2 * b200


@solves("gpus.q4")
def _() -> tuple[float, ...]:
    b200 = CHIPS["B200"]
    small = fm.comms_time(fm.matmul_bytes(64, 4096, 8192, 2), b200.hbm_bandwidth)
    large = fm.compute_time(fm.matmul_flops(512, 4096, 8192), _required(b200.bf16_flops, "B200 bf16 FLOP/s"))
    return small, large


@solves("gpus.q5")
def _() -> tuple[float, ...]:
    return 132 * 256 * KIB, 132 * 256 * KIB


@solves("gpus.q6")
def _() -> tuple[float, ...]:
    return (80e12 / (148 * 4 * 32 * 2),)  # cycles per second


@solves("gpus.q7")
def _() -> tuple[float, ...]:
    n = 1024**3
    return fm.intensity(n, 3 * 4 * n), fm.comms_time(12 * n, 3.35e12)


@solves("gpus.q8")
def _() -> tuple[float, ...]:
    return (min(8 * 450e9, 4 * 64 * 25e9),)  # one direction: GPU egress, capped by the switches


@solves("gpus.q9")
def _() -> tuple[float, ...]:
    return (8 * 450e9,)  # 4 GPUs each way across the cut, flow in both directions


@solves("gpus.q10")
def _() -> tuple[float, ...]:
    n, nbytes = 8, 4096 * 65536 * 2
    return ((n - 1) * nbytes / (n * 450e9),)


@solves("gpus.q13")
def _() -> tuple[float, ...]:
    n, nbytes = 8, 2 * 1024 * 16384
    return ((n - 1) * nbytes / (n * 450e9),)


@solves("gpus.q20")
def _() -> tuple[float, ...]:
    return 8 * 450e9 / 7, 2 * 400e9 / 1


@solves("gpus.q21")
def _() -> tuple[float, ...]:
    return 2250e12 / 900e9, 2250e12 / 400e9


def solve(key: str) -> tuple[float, ...]:
    """The computed answer of one numeric book question, in base units."""
    try:
        fn = SOLUTIONS[key]
    except KeyError:
        raise LookupError(f"no solution for {key}") from None
    return tuple(float(v) for v in fn())
