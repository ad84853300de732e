"""Parallelism for training: data parallelism, FSDP, tensor parallelism, their mix, DCN."""

import math

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "training.data-parallel", "tokens", """
    Pure data parallelism runs over {axes} ICI axes of a chip with {peak} FLOPs/s whose links carry
    {w} bytes/s bidirectionally. Below what per-chip token batch size does the gradient AllReduce
    stop being hidden behind the backward-pass compute?""",
    axes=2, peak=4.59e14, w=1.8e11)
def dp_threshold(axes, peak, w):
    return fm.dp_min_batch_per_chip(peak, w, axes)


@numeric(2, ("training.data-parallel", "training.memory"), "params", """
    With pure data parallelism every chip keeps the full model: bf16 parameters ({pbytes} bytes
    each), Adam's two fp32 moments ({moment} bytes each per parameter) and an fp32 master copy of
    the weights ({master} bytes per parameter). With {hbm} bytes of HBM per chip and nothing else
    stored (no gradients, no activations), what is the largest model that fits?""",
    pbytes=2, moment=4, master=4, hbm=9.6e10)
def dp_max_params(pbytes, moment, master, hbm):
    return hbm / (pbytes + 2 * moment + master)


@numeric(3, "training.fsdp", "tokens", """
    A model is trained with FSDP over {chips} chips, using all {axes} axes of the torus. Each chip
    does {peak} FLOPs/s and each link carries {w} bytes/s bidirectionally. What is the smallest
    global batch (in tokens) at which the weight gathers and gradient reduce-scatters stay hidden
    behind compute?""",
    chips=4096, axes=3, peak=4.59e14, w=1.8e11)
def fsdp_min_global_batch(chips, axes, peak, w):
    return chips * fm.dp_min_batch_per_chip(peak, w, axes)


@numeric(4, "training.tensor-parallel", "chips", """
    A model with MLP hidden size F = {f} uses tensor parallelism over {axes} mesh axis on chips
    with {peak} FLOPs/s and {w} bytes/s bidirectional link bandwidth. What is the largest
    tensor-parallel degree before the activation collectives dominate?""",
    f=24576, axes=1, peak=4.59e14, w=1.8e11)
def tp_limit(f, axes, peak, w):
    return fm.tp_max_degree(f, peak, w, axes)


@numeric(5, "training.mixed", "tokens", """
    Mixing FSDP with tensor parallelism on a 3D torus gives M_X * M_Y = {axes_product}. With chips
    of {peak} FLOPs/s, links of {w} bytes/s bidirectional and an MLP hidden size of {f}, what is the
    smallest per-chip token batch that remains compute-bound?""",
    axes_product=2, peak=4.59e14, w=1.8e11, f=53248)
def mixed_threshold(axes_product, peak, w, f):
    return fm.mixed_min_batch_per_chip(peak, w, f, axes_product)


@numeric(6, "training.mixed", "chips", """
    A run mixes FSDP (degree X) with tensor parallelism on {chips} chips, a global batch of
    {batch} tokens and MLP hidden size {f}; FSDP uses {mx} mesh axes and tensor parallelism {my}.
    What FSDP degree X balances the FSDP and the tensor-parallel communication (a real number, not
    rounded to a divisor)?""",
    chips=2048, batch=2097152, f=16384, mx=2, my=1)
def fsdp_degree(chips, batch, f, mx, my):
    return fm.optimal_fsdp(batch, f, mx, my, chips)


@numeric(7, "training.cross-pod", "tokens", """
    {pods} pods are joined over DCN and run pure data parallelism between pods. Each chip computes
    at {peak} FLOPs/s and has {dcn} bytes/s of DCN egress. What is the minimum global batch, in
    tokens, for the cross-pod gradient AllReduce to stay hidden behind compute?""",
    pods=4, peak=9.2e14, dcn=1.25e10)
def dcn_min_batch(pods, peak, dcn):
    # T_math = 8BDF / (N C) and T_comms = 8DF / (M W_dcn): each pod needs B M / N > C / W_dcn.
    return pods * peak / dcn


@numeric(8, "training.pipeline-dcn", "%", """
    A naive pipeline schedule (forward passes only) has {stages} stages and runs {micro}
    microbatches per step; every microbatch takes the same time on every stage, and a stage is idle
    until the first microbatch reaches it and after the last one leaves it. Define the bubble as the
    fraction of the schedule's total time, from the first stage starting to the last stage
    finishing, during which a given stage is idle. What is the bubble?""",
    stages=8, micro=24)
def bubble(stages, micro):
    return fm.pipeline_bubble(stages, micro)


@numeric(9, ("applied-training.duration", "transformers.6nd"), "s", """
    A {params}-parameter model trains on batches of {batch} tokens across {chips} chips of {peak}
    FLOPs/s at {mfu} model FLOPs utilisation (a fraction). How long does one step take?""",
    params=3e10, batch=4194304, chips=2048, peak=4.59e14, mfu=0.5)
def step_time(params, batch, chips, peak, mfu):
    return fm.training_time(params, batch, chips, peak, mfu)


@numeric(10, "training.pipeline-dcn", "", """
    A naive pipeline schedule (every microbatch's forward pass, then every backward pass, one stage
    at a time) has {stages} stages. How many microbatches bring its bubble, the idle fraction of the
    schedule, down to {target} (a fraction; a real number, not rounded)?""",
    stages=16, target=0.1)
def microbatches_for_bubble(stages, target):
    # (S - 1) / (M + S - 1) = t  <=>  M = (S - 1) (1 - t) / t
    return (stages - 1) * (1 - target) / target


@numeric(11, "training.cross-pod", "pods", """
    Pods train with pure data parallelism over DCN, the cross-pod gradient AllReduce overlapping
    with compute. Each chip computes at {peak} FLOPs/s and has {dcn} bytes/s of DCN egress. With a
    global batch of {batch} tokens, what is the largest whole number of pods for which the
    AllReduce stays hidden behind compute?""",
    peak=4.59e14, dcn=6.25e9, batch=4194304)
def max_pods(peak, dcn, batch):
    return math.floor(batch / (peak / dcn))  # each pod's share must exceed C / W_dcn tokens


# ---- pipelines without bubbles ---------------------------------------------------------------

@numeric(21, ("training.pipeline-dcn",), "", """
    A 1F1B pipeline has {s} stages and runs {m} microbatches per step; on every stage a
    microbatch's forward pass takes {tf} s and its backward pass {tb} s. What fraction of the step
    is a stage idle?""",
    s=4, m=16, tf=0.001, tb=0.002)
def one_f_one_b_bubble(s, m, tf, tb):
    return (s - 1) * (tf + tb) / ((m + s - 1) * (tf + tb))


@numeric(22, ("training.pipeline-dcn",), "", """
    A zero-bubble pipeline schedule splits each backward pass into its input-gradient and
    weight-gradient halves and moves the weight-gradient work into the slots where a 1F1B schedule
    would idle, so no stage ever waits. With {s} stages and {m} microbatches, each taking {tf} s
    forward and {tb} s backward per stage, how many times faster is its step than 1F1B's?""",
    s=8, m=32, tf=0.001, tb=0.002)
def zero_bubble_speedup(s, m, tf, tb):
    return (m + s - 1) * (tf + tb) / (m * (tf + tb))


@numeric(23, ("training.pipeline-dcn",), "microbatches", """
    A 1F1B pipeline has {s} stages. What is the smallest whole number of microbatches per step
    that keeps the idle fraction of the step at or below {target}?""",
    s=8, target=0.05)
def microbatches_for_small_bubble(s, target):
    # (s - 1) / (m + s - 1) <= t
    return math.ceil((s - 1) * (1 - target) / target - 1e-9)


# ---- communication in the backward pass ------------------------------------------------------

@numeric(24, ("training.data-parallel",), "s", """
    Pure data parallelism over one mesh axis that forms a full ring: after the backward pass every
    chip holds bf16 gradients ({gb} bytes each) for all {params} parameters, which must be summed
    over the axis. Each link carries {w} bytes/s bidirectionally. Ignoring latency and the
    (N - 1)/N factor, how long does that take?""",
    gb=2, params=1e9, w=9e10)
def dp_backward_allreduce(gb, params, w):
    return fm.allreduce_time(gb * params, w)


@numeric(25, ("training.fsdp",), "s", """
    FSDP shards a {params}-parameter bf16 model ({pb} bytes per parameter, gradients alike) over
    one mesh axis that forms a full ring with links of {w} bytes/s bidirectionally. In the backward
    pass every layer's weights must be present again and every chip must end with its own shard of
    the summed gradients. Ignoring latency and the (N - 1)/N factor, how much collective time does
    the backward pass take per step?""",
    params=7e9, pb=2, w=9e10)
def fsdp_backward_comms(params, pb, w):
    nbytes = pb * params
    return fm.allgather_time(nbytes, w) + fm.allgather_time(nbytes, w)  # gather weights, scatter gradients


@numeric(26, ("training.tensor-parallel",), "s", """
    A Megatron-style MLP block is sharded over one tensor-parallel axis (a full ring, links of {w}
    bytes/s bidirectionally): its first matrix is split by columns and its second by rows. In the
    backward pass, the gradient with respect to the block's input, a bf16 [B, D] array ({eb} bytes
    per element) with B = {tokens} tokens and D = {d}, must be complete on every chip. Ignoring
    latency and the (N - 1)/N factor, how long does that collective take?""",
    w=9e10, eb=2, tokens=16384, d=8192)
def tp_backward_allreduce(w, eb, tokens, d):
    return fm.allreduce_time(eb * tokens * d, w)
