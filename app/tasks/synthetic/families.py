"""The synthetic task families. Each family draws its shapes and chip from ``Draws`` and returns
the prompt, the required values (as quantity text the numeric grader parses), and the raw
parameters it drew (public: every one of them is stated in the prompt).

Conventions follow the book: a multiply-add is 2 FLOPs; bf16 is 2 bytes; collectives on an axis
with wraparound use the bidirectional link bandwidth, a line without it the one-way bandwidth;
FSDP/TP per-layer communication uses the book's forward-pass expressions, which the prompt
states in full (they leave out the ring factor that the collective family teaches)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.tasks import formulas as fm
from app.tasks.hardware import COMPUTE_CHIPS, TPUS
from app.tasks.synthetic.rng import Draws

DTYPES = (("bf16", 2), ("fp32", 4), ("int8", 1))
ANSWER_ONE = "End with one line `Final answer: <value> <unit>`."


@dataclass(frozen=True, slots=True)
class Generated:
    prompt: str
    gold: tuple[str, ...]
    chapter: str
    tags: tuple[str, ...]
    params: dict[str, Any]


def _q(value: float, unit: str) -> str:
    return f"{value!r} {unit}"


def _a(word: str) -> str:
    """The indefinite article for a chip or collective name ("an H100", "a ReduceScatter")."""
    return f"an {word}" if word[0] in "AEHIO" else f"a {word}"


def _answer_many(*parts: str) -> str:
    return "End with one line `Final answer: " + ", ".join(parts) + "`, with units."


def matmul_cost(d: Draws) -> Generated:
    dtype, nbytes = d.choice(DTYPES)
    b, dd, f = d.multiple(1, 8192, 8), d.multiple(512, 16384, 256), d.multiple(512, 65536, 256)
    flops = fm.matmul_flops(b, dd, f)
    moved = fm.matmul_bytes(b, dd, f, nbytes)
    prompt = (
        f"A matmul computes Y[B, F] = X[B, D] @ W[D, F] with B = {b}, D = {dd}, F = {f}. "
        f"X, W and Y are stored in {dtype} ({nbytes} byte(s) per element). Count the FLOPs "
        "(a multiply-add is 2 FLOPs) and the HBM bytes moved, assuming X and W are read once "
        f"and Y is written once. {_answer_many('<flops> FLOPs', '<bytes> bytes')}"
    )
    return Generated(prompt, (_q(flops, "FLOPs"), _q(moved, "bytes")), "roofline", ("roofline.matmul",),
                     {"B": b, "D": dd, "F": f, "bytes_per_element": nbytes})


def arithmetic_intensity(d: Draws) -> Generated:
    dtype, nbytes = d.choice(DTYPES)
    b, dd, f = d.multiple(1, 4096, 1), d.multiple(512, 16384, 512), d.multiple(512, 32768, 512)
    intensity = fm.intensity(fm.matmul_flops(b, dd, f), fm.matmul_bytes(b, dd, f, nbytes))
    prompt = (
        f"What is the arithmetic intensity (FLOPs per byte of HBM traffic) of multiplying "
        f"X[B, D] by W[D, F] with B = {b}, D = {dd}, F = {f}, everything in {dtype} ({nbytes} "
        "byte(s) per element), counting reads of X and W and the write of the [B, F] output? "
        "Give it in FLOPs/byte. " + ANSWER_ONE
    )
    return Generated(prompt, (_q(intensity, "FLOPs/byte"),), "roofline", ("roofline.arithmetic-intensity",),
                     {"B": b, "D": dd, "F": f, "bytes_per_element": nbytes})


def critical_batch(d: Draws) -> Generated:
    chip = d.choice(COMPUTE_CHIPS)
    wname, wbytes = d.choice((("bf16", 2), ("int8", 1)))
    peak, bw = chip.bf16_flops, chip.hbm_bandwidth
    assert peak is not None
    batch = fm.critical_batch(peak, bw, wbytes)
    prompt = (
        f"On {_a(chip.name)} with {peak:.6g} bf16 FLOP/s and {bw:.6g} bytes/s of HBM bandwidth, a "
        f"matmul multiplies bf16 activations [B, D] by {wname} weights [D, F] ({wbytes} byte(s) per "
        "weight), computing in bf16. Assume B is much smaller than D and F, so weight loading "
        "dominates memory traffic. Above what batch size B (in tokens) does the matmul become "
        f"compute-bound? {ANSWER_ONE}"
    )
    return Generated(prompt, (_q(batch, "tokens"),), "roofline", ("roofline.matmul", "tpus.specs"),
                     {"peak_flops": peak, "hbm_bandwidth": bw, "weight_bytes": wbytes})


def roofline_time(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    flops = d.integer(10, 9999) * 10.0 ** d.integer(9, 13)
    hbm = d.integer(10, 9999) * 10.0 ** d.integer(6, 9)
    ici = d.integer(10, 9999) * 10.0 ** d.integer(5, 8) if d.coin() else 0.0
    overlap = d.coin()
    assert chip.bf16_flops is not None and chip.ici_bandwidth_bidi is not None
    times = (flops / chip.bf16_flops, hbm / chip.hbm_bandwidth, ici / chip.ici_bandwidth_bidi)
    total = max(times) if overlap else sum(times)
    comms = (
        f", and sends {ici:.6g} bytes over ICI at {chip.ici_bandwidth_bidi:.6g} bytes/s" if ici else ""
    )
    parts = "compute, HBM traffic and ICI traffic" if ici else "compute and HBM traffic"
    how = (
        f"{parts[0].upper()}{parts[1:]} overlap perfectly, so the slowest one sets the time."
        if overlap
        else f"Nothing overlaps: {parts} happen one after another."
    )
    prompt = (
        f"A kernel on one {chip.name} ({chip.bf16_flops:.6g} bf16 FLOP/s, {chip.hbm_bandwidth:.6g} "
        f"bytes/s HBM bandwidth) performs {flops:.6g} FLOPs, moves {hbm:.6g} bytes to and from HBM"
        f"{comms}. {how} How long does it take, running at peak rates? {ANSWER_ONE}"
    )
    params = {"flops": flops, "hbm_bytes": hbm, "overlap": overlap, "peak_flops": chip.bf16_flops,
              "hbm_bandwidth": chip.hbm_bandwidth}
    if ici:
        params |= {"ici_bytes": ici, "ici_bandwidth": chip.ici_bandwidth_bidi}
    return Generated(prompt, (_q(total, "s"),), "roofline", ("roofline.time-bounds", "roofline.network"), params)


def kv_cache(d: Draws) -> Generated:
    layers, heads = d.choice((16, 24, 32, 40, 48, 64, 80, 96, 126)), d.choice((8, 16, 32, 40, 64, 128))
    group = d.choice((1, 1, 2, 4, 8))
    kv_heads = max(1, heads // group)
    head_dim = d.choice((64, 96, 128, 256))
    batch, seq = d.choice((1, 4, 8, 16, 32, 64, 128, 256)), d.choice((512, 1024, 2048, 4096, 8192, 32768, 131072))
    dtype, nbytes = d.choice((("bf16", 2), ("int8", 1)))
    size = fm.kv_cache_bytes(batch * seq, layers, kv_heads, head_dim, nbytes)
    attention = "multi-head attention" if kv_heads == heads else f"grouped-query attention with {kv_heads} KV heads"
    prompt = (
        f"A decoder has {layers} layers and {heads} query heads of dimension {head_dim}, using "
        f"{attention}. How many bytes does its KV cache take for a batch of {batch} sequences of "
        f"{seq} tokens each, with keys and values stored in {dtype} ({nbytes} byte(s) per element)? "
        + ANSWER_ONE
    )
    return Generated(prompt, (_q(size, "bytes"),), "transformers", ("transformers.kv-cache", "inference.memory"),
                     {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "batch": batch,
                      "seq": seq, "bytes_per_element": nbytes})


def param_count(d: Draws) -> Generated:
    dmodel = d.multiple(1024, 16384, 512)
    ffw = dmodel * d.choice((2, 3, 4)) + d.multiple(0, 2048, 256)
    layers, heads = d.integer(8, 128), d.choice((8, 16, 32, 64, 128))
    kv_heads, head_dim = max(1, heads // d.choice((1, 2, 4, 8))), d.choice((64, 128, 256))
    vocab = d.choice((32000, 32768, 50304, 128256, 256000))
    tied = d.coin()
    per_layer = fm.mlp_params(dmodel, ffw) + fm.attention_params(dmodel, heads, kv_heads, head_dim)
    total = layers * per_layer + (1 if tied else 2) * dmodel * vocab
    emb = "one embedding matrix shared by input and output" if tied else "separate input and output embeddings"
    prompt = (
        f"Count the parameters of a decoder-only transformer with D = {dmodel}, a gated MLP of "
        f"hidden size F = {ffw} (three D×F matrices), L = {layers} layers, {heads} query heads and "
        f"{kv_heads} key/value heads of head dimension {head_dim} (Q, K, V and output projections, "
        f"no biases), vocabulary V = {vocab} and {emb}. Ignore norms. Give the count in parameters. "
        + ANSWER_ONE
    )
    return Generated(prompt, (_q(total, "params"),), "transformers", ("transformers.param-count",),
                     {"D": dmodel, "F": ffw, "L": layers, "N": heads, "K": kv_heads, "H": head_dim,
                      "V": vocab, "tied": tied})


def training_flops(d: Draws) -> Generated:
    params = d.integer(1, 999) * 10.0 ** d.integer(8, 10)
    tokens = params * d.choice((10, 20, 50, 100, 200))  # a tokens-per-parameter ratio runs use
    chip = d.choice(COMPUTE_CHIPS)
    mfu = d.choice((0.3, 0.4, 0.5, 0.6))
    assert chip.bf16_flops is not None
    flops = fm.training_flops(params, tokens)
    # Enough chips (a power of two, at least 8) to finish within a run's length of days: a run
    # that would last decades is not a question anyone asks.
    days = d.choice((7, 30, 90))
    needed = flops / (chip.bf16_flops * mfu * days * 86400)
    n_chips = max(8, 2 ** max(0, math.ceil(math.log2(needed)))) if needed > 0 else 8
    seconds = fm.training_time(params, tokens, n_chips, chip.bf16_flops, mfu)
    prompt = (
        f"A dense model with {params:.6g} parameters is trained on {tokens:.6g} tokens. Using "
        f"the 6·N·D rule, how many training FLOPs is that, and how long does it take on {n_chips} "
        f"{chip.name} chips ({chip.bf16_flops:.6g} bf16 FLOP/s each) at {mfu:.0%} model FLOPs "
        f"utilisation? {_answer_many('<flops> FLOPs', '<time> <unit>')}"
    )
    return Generated(prompt, (_q(flops, "FLOPs"), _q(seconds, "s")), "transformers", ("transformers.6nd",),
                     {"params": params, "tokens": tokens, "chips": n_chips, "peak_flops": chip.bf16_flops,
                      "mfu": mfu})


def inference_flops(d: Draws) -> Generated:
    params = d.integer(1, 999) * 10.0 ** d.integer(8, 10)
    batch, generated = d.choice((1, 8, 32, 64, 128, 256)), d.choice((128, 256, 512, 1024, 4096))
    flops = fm.inference_flops(params, batch * generated)
    prompt = (
        f"A dense model with {params:.6g} parameters generates {generated} tokens for each of "
        f"{batch} sequences. Ignoring attention over the context, how many FLOPs does the "
        f"forward computation take in total (2 FLOPs per parameter per token)? {ANSWER_ONE}"
    )
    return Generated(prompt, (_q(flops, "FLOPs"),), "transformers", ("transformers.6nd", "inference.prefill-decode"),
                     {"params": params, "batch": batch, "generated": generated})


COLLECTIVES = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll")


def collective_time(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    op = d.choice(COLLECTIVES)
    n = d.choice((4, 8, 16))
    wrap = True if op == "AllToAll" else d.coin()
    size = d.integer(1, 999) * 10.0 ** d.integer(6, 9)
    assert chip.ici_bandwidth_bidi is not None and chip.ici_bandwidth_oneway is not None
    bw = chip.ici_bandwidth_bidi if wrap else chip.ici_bandwidth_oneway
    base = size * (n - 1) / n / bw
    seconds = {"AllGather": base, "ReduceScatter": base, "AllReduce": 2 * base, "AllToAll": size / (4 * bw)}[op]
    topology = "a ring with wraparound links" if wrap else "a line of chips without wraparound"
    prompt = (
        f"{n} {chip.name} chips form one mesh axis laid out as {topology}. Each ICI link carries "
        f"{chip.ici_bandwidth_oneway:.6g} bytes/s in each direction ({chip.ici_bandwidth_bidi:.6g} bytes/s "
        f"both ways). Estimate the time of {_a(op)} over this axis of an array whose full (unsharded) "
        f"size is {size:.6g} bytes. Conventions: ignore per-hop latency; a ring with wraparound uses "
        "both directions and a line only one; AllGather and ReduceScatter move (N-1)/N of the array "
        "through each chip's links; an AllReduce is a ReduceScatter then an AllGather; an AllToAll on "
        f"a bidirectional ring costs a quarter of the array over the both-ways link bandwidth. {ANSWER_ONE}"
    )
    return Generated(prompt, (_q(seconds, "s"),), "sharding",
                     ("sharding.allgather-reducescatter", "sharding.allreduce-alltoall"),
                     {"op": op, "n": n, "wraparound": wrap, "array_bytes": size,
                      "ici_oneway": chip.ici_bandwidth_oneway, "ici_bidi": chip.ici_bandwidth_bidi})


def fsdp_vs_tp(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    x, y = d.choice((4, 8, 16, 32, 64)), d.choice((2, 4, 8, 16))
    dmodel, ffw = d.multiple(2048, 16384, 1024), d.multiple(8192, 65536, 2048)
    batch = d.choice((64, 128, 256, 512, 1024)) * 1024
    assert chip.ici_bandwidth_bidi is not None
    bw, nbytes = chip.ici_bandwidth_bidi, 2
    fsdp = 2 * nbytes * dmodel * ffw / (y * bw)
    tp = 2 * nbytes * batch * dmodel / (x * bw)
    prompt = (
        f"A transformer MLP (D = {dmodel}, F = {ffw}, bf16 weights and activations) is trained on "
        f"{x * y} {chip.name} chips arranged as X = {x} (FSDP) by Y = {y} (tensor parallel), with a "
        f"global batch of B = {batch} tokens and {bw:.6g} bytes/s of bidirectional ICI bandwidth per "
        "axis. Use the book's per-layer forward-pass estimates, which count 2 bytes per bf16 "
        "element and leave out the (N-1)/N ring factor: the FSDP communication time is "
        "T_fsdp = 4·D·F / (Y·W) (gathering the MLP's weights) and the tensor-parallel "
        "communication time is T_tp = 4·B·D / (X·W) (moving its activations), with W the "
        "bidirectional ICI bandwidth. Give the FSDP time first and the tensor-parallel time second. "
        + _answer_many("<fsdp time> <unit>", "<tp time> <unit>")
    )
    return Generated(prompt, (_q(fsdp, "s"), _q(tp, "s")), "training", ("training.mixed", "training.fsdp"),
                     {"X": x, "Y": y, "D": dmodel, "F": ffw, "B": batch, "ici_bidi": bw, "bytes_per_element": nbytes})


def decode_step_time(d: Draws) -> Generated:
    chip = d.choice(COMPUTE_CHIPS)
    params = d.integer(1, 400) * 1e9
    n_chips = d.choice((1, 2, 4, 8, 16, 32))
    kv_bytes = d.integer(0, 500) * 1e9
    nbytes = d.choice((2, 1))
    seconds = fm.decode_step_time(params * nbytes, kv_bytes, n_chips, chip.hbm_bandwidth)
    prompt = (
        f"A {params:.6g}-parameter model with {nbytes}-byte weights decodes on {n_chips} {chip.name} "
        f"chip(s) ({chip.hbm_bandwidth:.6g} bytes/s of HBM bandwidth each), with weights and a "
        f"{kv_bytes:.6g}-byte KV cache sharded evenly across them. At small batch every decode step "
        "reads all weights and the whole KV cache from HBM once. What is the lower bound on the time "
        f"of one decode step? {ANSWER_ONE}"
    )
    return Generated(prompt, (_q(seconds, "s"),), "inference", ("inference.latency-throughput",),
                     {"params": params, "weight_bytes": nbytes, "kv_bytes": kv_bytes, "chips": n_chips,
                      "hbm_bandwidth": chip.hbm_bandwidth})


def training_memory(d: Draws) -> Generated:
    chip = d.choice(COMPUTE_CHIPS)
    master = d.coin()
    per_param = 2 + 2 + 2 * 4 + (4 if master else 0)
    # At most 48 chips: beyond 50, a 2% tolerance cannot tell rounding up from rounding down.
    params = d.integer(1, max(1, int(48 * chip.hbm_bytes / per_param / 1e9))) * 1e9
    total = params * per_param
    chips = -(-total // chip.hbm_bytes)
    extra = ", plus an fp32 master copy of the weights (4 bytes)" if master else ""
    prompt = (
        f"Training a {params:.6g}-parameter model keeps, per parameter, bf16 weights (2 bytes), bf16 "
        f"gradients (2 bytes) and two fp32 Adam moments (4 bytes each){extra}. How many bytes does that "
        f"state take, and how many {chip.name} "
        f"chips ({chip.hbm_bytes:.6g} bytes of HBM each) are needed just to hold it, sharded evenly? "
        "Round the chip count up. " + _answer_many("<bytes> bytes", "<n> chips")
    )
    return Generated(prompt, (_q(total, "bytes"), _q(chips, "chips")), "training", ("training.memory",),
                     {"params": params, "master_copy": master, "hbm_bytes": chip.hbm_bytes})


FAMILIES: dict[str, Callable[[Draws], Generated]] = {
    f.__name__: f
    for f in (
        matmul_cost, arithmetic_intensity, critical_batch, roofline_time, kv_cache, param_count,
        training_flops, inference_flops, collective_time, fsdp_vs_tp, decode_step_time, training_memory,
    )
}
