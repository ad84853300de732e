"""Training LLaMA-style models on TPUs: counting a real model, choosing its sharding."""

import math

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "applied-training.counting", "params", """
    A model has {layers} layers, d_model = {d}, d_ff = {f} with a gated MLP (three matrices),
    {heads} query heads and {kv} KV heads with head dimension {hd}, and untied embeddings over
    {vocab} tokens. Counting only the weight matrices, how many parameters does it have?""",
    layers=126, d=16384, f=53248, heads=128, kv=8, hd=128, vocab=128256)
def llama_params(layers, d, f, heads, kv, hd, vocab):
    return fm.dense_params(layers, d, f, heads, kv, hd, vocab)


@numeric(2, ("applied-training.duration", "applied-training.counting"), "s", """
    A {params}-parameter dense model is pretrained on {tokens} tokens on a pod of {chips} chips with
    {peak} bf16 FLOPs/s each, at {mfu} MFU (a fraction). How long does training take?""",
    params=8e9, tokens=1.5e13, chips=8960, peak=4.59e14, mfu=0.4)
def pretrain_time(params, tokens, chips, peak, mfu):
    return fm.training_time(params, tokens, chips, peak, mfu)


@numeric(3, ("applied-training.counting", "training.memory"), ("B", "chips"), """
    Training a {params}-parameter model keeps bf16 parameters ({pbytes} bytes each), optimizer
    state of {obytes} bytes per parameter, and bf16 activation checkpoints ({abytes} bytes per value)
    of width {d}, saved {ckpt} times per layer for each of the {tokens} tokens of a batch, over
    {layers} layers. How many bytes does that need in total, and how many chips with {hbm} bytes of
    HBM each are needed at minimum to hold it?""",
    params=8e9, pbytes=2, obytes=8, abytes=2, d=4096, ckpt=4, tokens=4194304, layers=32, hbm=9.6e10)
def training_memory(params, pbytes, obytes, abytes, d, ckpt, tokens, layers, hbm):
    total = params * (pbytes + obytes) + abytes * d * ckpt * tokens * layers
    return total, math.ceil(total / hbm)


@numeric(4, "applied-training.sharding-plan", "tokens", """
    A batch of {seqs} sequences of {seqlen} tokens is split over {chips} chips with FSDP across both
    the batch and sequence dimensions. How many tokens does each chip process per step?""",
    seqs=512, seqlen=8192, chips=6144)
def tokens_per_chip(seqs, seqlen, chips):
    return seqs * seqlen / chips


@numeric(5, "applied-training.sharding-plan", "chips", """
    For a run with a global batch of B = {batch} tokens on N = {chips} chips and d_ff = {f}, FSDP
    runs over {mx} mesh axes and tensor parallelism over 1. What FSDP degree balances the two kinds
    of communication (a real number, not rounded to a divisor)?""",
    batch=2097152, chips=4096, f=28672, mx=2)
def balanced_fsdp(batch, chips, f, mx):
    return fm.optimal_fsdp(batch, f, mx, 1, chips)


@numeric(6, "applied-training.sharding-plan", "tokens", """
    Chips do {peak} FLOPs/s with {w} bytes/s of bidirectional ICI per link. For a model with
    d_ff = {f}, mixed FSDP and tensor parallelism with two axes for FSDP and one for tensor
    parallelism (M_X M_Y = {axes_product}) stays compute-bound down to what per-chip token batch?""",
    peak=4.59e14, w=1.8e11, f=14336, axes_product=2)
def mixed_floor(peak, w, f, axes_product):
    return fm.mixed_min_batch_per_chip(peak, w, f, axes_product)


@numeric(7, ("applied-training.duration", "applied-training.counting"), ("FLOPs", "s"), """
    How many training FLOPs does one token cost for a {params}-parameter dense model (6 FLOPs per
    parameter per token), and how long would one chip with {peak} FLOPs/s take to do them at full
    utilisation? (FLOPs first)""",
    params=4.05e11, peak=4.59e14)
def flops_per_token(params, peak):
    per_token = fm.training_flops(params, 1)
    return per_token, fm.compute_time(per_token, peak)
