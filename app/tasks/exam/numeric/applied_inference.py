"""Serving LLaMA-style models on TPUs: memory, chips needed, latency, cost."""

import math

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, ("applied-inference.memory", "transformers.kv-cache"), "B", """
    A model with {layers} layers and {kv} KV heads of dimension {hd} stores its KV cache at {b}
    byte per element. How many bytes of cache does each token add?""",
    layers=126, kv=8, hd=128, b=1)
def kv_per_token(layers, kv, hd, b):
    return fm.kv_cache_bytes(1, layers, kv, hd, b)


@numeric(2, ("applied-inference.memory", "applied-inference.serving"), ("B", "chips"), """
    A {params}-parameter model is served in int8 ({bpp} byte per parameter) with a batch of {batch}
    sequences of {seqlen} tokens, each token's KV cache taking {kvtok} bytes. What is the total
    memory needed, and how many chips with {hbm} bytes of HBM are needed at minimum?""",
    params=7e10, bpp=1, batch=64, seqlen=4096, kvtok=131072, hbm=1.6e10)
def serving_memory(params, bpp, batch, seqlen, kvtok, hbm):
    total = params * bpp + batch * seqlen * kvtok
    return total, math.ceil(total / hbm)


@numeric(3, "applied-inference.serving", ("s", "tokens/s"), """
    On {chips} chips with {bw} bytes/s of HBM bandwidth each, a memory-bound decode step reads
    {total} bytes of weights and KV caches for a batch of {batch} sequences. What is the step time,
    and what throughput in tokens per second per chip results?""",
    chips=16, bw=8.1e11, total=1.5e11, batch=48)
def serving_step(chips, bw, total, batch):
    step = fm.comms_time(total, chips * bw)
    return step, batch / step / chips


@numeric(4, "applied-inference.serving", "FLOPs", """
    An accelerator rents for {price} dollars per hour and delivers {peak} bf16 FLOPs/s. How many
    peak FLOPs does one dollar buy?""",
    price=1.2, peak=1.97e14)
def flops_per_dollar(price, peak):
    return peak * 3600 / price


@numeric(5, "applied-inference.serving", "queries/s", """
    A server decodes a batch of {batch} queries per step, each step taking {step} s, and the median
    answer is {length} tokens long. Running on {chips} chips, how many queries per second does each
    chip complete?""",
    batch=43, step=0.019, length=1024, chips=8)
def qps_per_chip(batch, step, length, chips):
    return batch / (step * length * chips)


@numeric(6, "applied-inference.serving", "s", """
    When a chip's whole HBM of {hbm} bytes is filled with weights and caches, each decode step must
    stream all of it at {bw} bytes/s. How long does generating {tokens} tokens take at this bound?""",
    hbm=3.2e10, bw=1.6e12, tokens=512)
def full_hbm_generation(hbm, bw, tokens):
    return fm.comms_time(hbm, bw) * tokens


@numeric(7, ("applied-inference.model-parallel", "inference.sharding"), "chips", """
    Serving a model with d_ff = {f} shards it over {axes} ICI axes. Its chips have {peak} FLOPs/s
    and {w} bytes/s of bidirectional link bandwidth. Roughly how many ways can it be model-sharded
    before the matmul communication is no longer hidden?""",
    f=53248, axes=2, peak=1.97e14, w=9e10)
def serving_tp_limit(f, axes, peak, w):
    return fm.tp_max_degree(f, peak, w, axes)


@numeric(8, ("applied-inference.balancing", "inference.engine"), "", """
    In disaggregated serving a prefill server handles one prompt at a time, taking {prefill} s per
    prompt. A generate server decodes a batch of {batch} sequences, producing one token for every
    sequence each {step} s, and every sequence generates {length} tokens before it leaves the batch.
    How many prefill servers are needed per generate server so that prompts are prefilled exactly
    as fast as the generate servers free their slots?""",
    prefill=0.5, batch=64, step=0.025, length=1024)
def prefill_servers_per_generate(prefill, batch, step, length):
    # A generate server frees batch / (step * length) slots per second; a prefill server fills
    # 1 / prefill. Balance: P / prefill = G * batch / (step * length).
    return batch * prefill / (step * length)
