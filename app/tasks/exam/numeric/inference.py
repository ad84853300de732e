"""Transformer inference: prefill versus decode, latency and throughput, memory, sharding."""

import math

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "inference.prefill-decode", "s", """
    Prefill of a {prompt}-token prompt runs on a {params}-parameter dense model spread over {chips}
    chips of {peak} FLOPs/s each, reaching {mfu} of peak (a fraction). Counting 2 FLOPs per
    parameter per token and ignoring attention, how long does the prefill take?""",
    prompt=4096, params=3e10, chips=8, peak=1.97e14, mfu=0.5)
def prefill_time(prompt, params, chips, peak, mfu):
    return fm.inference_flops(params, prompt) / (chips * peak * mfu)


@numeric(2, "inference.latency-throughput", "s", """
    A model with {params} parameters stored at {bpp} bytes each decodes a batch whose KV caches
    total {kv} bytes, on {chips} chips with {bw} bytes/s of HBM bandwidth each. Taking the step as
    memory-bound, how long does one decode step take at least?""",
    params=1.3e10, bpp=2, kv=1.2e10, chips=4, bw=8.1e11)
def decode_latency(params, bpp, kv, chips, bw):
    return fm.decode_step_time(params * bpp, kv, chips, bw)


@numeric(3, "inference.latency-throughput", "tokens/s", """
    A decode step for a batch of {batch} sequences reads {params} parameters at {bpp} bytes each
    plus {kvseq} bytes of KV cache per sequence, spread over {chips} chips with {bw} bytes/s of HBM
    bandwidth each. If the step is memory-bound, how many tokens per second does each chip
    generate?""",
    batch=64, params=8e9, bpp=1, kvseq=5.4e8, chips=4, bw=8.1e11)
def decode_throughput(batch, params, bpp, kvseq, chips, bw):
    step = fm.decode_step_time(params * bpp, batch * kvseq, chips, bw)
    return batch / step / chips


@numeric(4, "inference.memory", "sequences", """
    A {params}-parameter model in int8 ({bpp} byte per parameter) is served on {chips} chips with
    {hbm} bytes of HBM each. Every sequence's KV cache takes {kvtok} bytes per token and sequences
    run to {seqlen} tokens. How many whole sequences fit in the memory left after the weights?""",
    params=7e10, bpp=1, chips=16, hbm=1.6e10, kvtok=163840, seqlen=8192)
def max_batch(params, bpp, chips, hbm, kvtok, seqlen):
    return math.floor((chips * hbm - params * bpp) / (kvtok * seqlen))


@numeric(5, "inference.sharding", "chips", """
    During decode with model parallelism over Y chips, each chip moves the bf16 [B, D] activations
    over ICI at {wici} bytes/s, and streams its 1/Y share of a bf16 [D, F] weight matrix from HBM
    at {whbm} bytes/s. For a batch of B = {batch} tokens and MLP width F = {f}, what is the largest
    Y before the ICI transfer takes longer than the weight loading?""",
    wici=9e10, whbm=8.1e11, batch=32, f=28672)
def decode_tp_limit(wici, whbm, batch, f):
    return f * wici / (batch * whbm)


@numeric(6, "inference.engine", "FLOPs", """
    {requests} requests share the same {prefix}-token system prompt. With prefix caching, its KV
    cache is computed once instead of once per request. For a {params}-parameter model (2 FLOPs per
    parameter per token), how many prefill FLOPs does the cache save?""",
    requests=1000, prefix=2048, params=8e9)
def prefix_cache_saving(requests, prefix, params):
    return fm.inference_flops(params, prefix) * (requests - 1)


@numeric(7, "inference.sharding", "chips", """
    Model parallelism over Y chips moves the [B, D] activations, {b} byte per element, in each
    collective for a decode batch of B = {batch} tokens and width D = {d}. Links carry {w} bytes/s
    and every hop costs at least {hop} s. Beyond what Y does each chip's share of the transfer
    become too small to be bandwidth-bound (smaller than the bytes a link moves in one hop
    latency)?""",
    b=1, batch=64, d=8192, w=4.5e10, hop=1e-6)
def latency_bound_degree(b, batch, d, w, hop):
    return batch * d * b / (w * hop)


@numeric(8, ("inference.attention-roofline", "inference.latency-throughput"), "s", """
    During decode, attention reads the whole KV cache of every sequence each step. A batch of
    {batch} sequences each holding {seqlen} tokens of cache at {kvtok} bytes per token is spread over
    {chips} chips with {bw} bytes/s HBM bandwidth. How long does reading the caches take per step?""",
    batch=128, seqlen=4096, kvtok=327680, chips=16, bw=8.1e11)
def kv_read_time(batch, seqlen, kvtok, chips, bw):
    return fm.comms_time(batch * seqlen * kvtok, chips * bw)
