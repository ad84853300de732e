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
    params=7e10, bpp=1, chips=16, hbm=1.6e10, kvtok=131072, seqlen=8192)
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


# ---- speculative sampling (the chapter's appendix on speculative decoding) -------------------

@numeric(21, ("inference.latency-throughput", "inference.engine"), "tokens", """
    In speculative decoding a draft model proposes {k} tokens per step. The target model checks
    them in one pass: it accepts each drafted token independently with probability {p}, stops at
    the first rejection, and then always emits one token of its own. What is the expected number
    of tokens produced per target-model pass?""",
    k=4, p=0.8)
def speculative_tokens_per_pass(k, p):
    return (1 - p ** (k + 1)) / (1 - p)  # 1 + p + ... + p^k: accepted drafts plus the target's token


@numeric(22, ("inference.latency-throughput", "inference.engine"), "s", """
    A target model's verification pass takes {t_target} s and the draft model spends {t_draft} s
    per drafted token. Each step drafts {k} tokens; the target accepts each independently with
    probability {p}, stops at the first rejection and then emits one token of its own. What is the
    average time per generated token?""",
    t_target=0.02, t_draft=0.002, k=4, p=0.8)
def speculative_time_per_token(t_target, t_draft, k, p):
    return (k * t_draft + t_target) / speculative_tokens_per_pass(k, p)


@numeric(23, ("inference.latency-throughput", "inference.engine"), "tokens", """
    A draft model proposes {k} tokens per step and the target model accepts each independently
    with probability {p}, stopping at the first rejection. On average, how many of the drafted
    tokens are accepted per step?""",
    k=5, p=0.6)
def speculative_accepted(k, p):
    return p * (1 - p**k) / (1 - p)  # p + p^2 + ... + p^k


# ---- latency against throughput as the batch grows -------------------------------------------

@numeric(24, ("inference.latency-throughput", "inference.prefill-decode"), ("s", "tokens/s"), """
    A {params}-parameter model stores {wb} bytes per weight and decodes on {chips} chips; every
    chip reads HBM at {bw} bytes/s and computes {peak} FLOPs/s. Every sequence's KV cache holds
    {kv} bytes. In one decode step the chips read the weights and every sequence's KV cache once
    and do {fpp} FLOPs per parameter per sequence; memory traffic and compute overlap. For a batch
    of {batch} sequences, give the step time, then the throughput in tokens per second over all
    chips.""",
    params=8e9, wb=2, chips=4, bw=8.1e11, peak=1.97e14, kv=1e8, fpp=2, batch=64)
def decode_latency_and_throughput(params, wb, chips, bw, peak, kv, fpp, batch):
    memory = (wb * params + batch * kv) / (chips * bw)
    compute = fpp * params * batch / (chips * peak)
    step = max(memory, compute)
    return step, batch / step


@numeric(25, ("inference.latency-throughput", "inference.prefill-decode"), "sequences", """
    A {params}-parameter model stores {wb} bytes per weight and decodes on {chips} chips that read
    HBM at {bw} bytes/s and compute {peak} FLOPs/s apiece; every sequence adds {kv} bytes of KV
    cache read per step, and a step does {fpp} FLOPs per parameter per sequence. Memory traffic and
    compute overlap. At what batch size does the step's compute time catch up with its memory
    time (a real number)?""",
    params=8e9, wb=2, chips=4, bw=8.1e11, peak=1.97e14, kv=1e7, fpp=2)
def decode_crossover_batch(params, wb, chips, bw, peak, kv, fpp):
    # (wb P + B kv) / (n bw) = fpp P B / (n peak)
    return wb * params / (chips * bw) / (fpp * params / (chips * peak) - kv / (chips * bw))


@numeric(26, ("inference.latency-throughput",), "sequences", """
    A {params}-parameter model stores {wb} bytes per weight and serves on {chips} chips that read
    HBM at {bw} bytes/s and compute {peak} FLOPs/s apiece; every sequence's KV cache is {kv}
    bytes, read once per step, and a step does {fpp} FLOPs per parameter per sequence, overlapping
    with memory traffic. What is the largest whole batch whose decode step stays within {target} s?""",
    params=8e9, wb=2, chips=4, bw=8.1e11, peak=1.97e14, kv=1e8, fpp=2, target=0.01)
def largest_batch_within_latency(params, wb, chips, bw, peak, kv, fpp, target):
    by_memory = (target * chips * bw - wb * params) / kv
    by_compute = target * chips * peak / (fpp * params)
    return math.floor(min(by_memory, by_compute))
