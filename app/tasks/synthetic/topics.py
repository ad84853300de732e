"""Synthetic families for nine topics of the book no earlier family touched: speculative sampling,
FlashAttention and the cost of softmax and norms, causal masking, latency against throughput,
the expert-parallel AllToAll, zero-bubble pipelines, GB200 NVL72, backward-pass communication
and reading a profiler trace.

Each family is a pair: a draw (shapes, chip, probabilities from ``Draws``; the prompt states
every one of them, with the conventions a solver needs: bytes per element, what counts as a
FLOP, which link) and an oracle (``ORACLES[name]``) that computes the key from the drawn
parameters alone. The prompts never state the formula, the solving step or a figure the oracle
computes on the way: the difficulty tag (steps the oracle takes) is what the solver must find.

Figures of the GPUs come from ``app/tasks/hardware.py`` (the book's tables); the NVL72 rack's
scale-out egress (3.6e12 bytes/s for 72 GPUs, 400 Gbit/s per GPU) is the book's node table."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from app.tasks.hardware import COMPUTE_CHIPS, TPUS
from app.tasks.synthetic.families import ANSWER_ONE, Generated, _answer_many, _q
from app.tasks.synthetic.rng import Draws

NVL72_GPUS = 72
NVL72_NVLINK = 900e9  # bytes/s each B200 sends over NVLink (gpus: node table)
NVL72_RACK_EGRESS = 3600e9  # bytes/s a GB200 NVL72 rack sends to the scale-out network
NIC_BITS = (200, 400, 800)  # Gbit/s per GPU of scale-out NIC a deployment may have
GPUS_WITH_NVLINK = tuple(c for c in COMPUTE_CHIPS if c.nvlink_bandwidth)
CONVENTIONS = "A multiply-add is 2 FLOPs; bf16 is 2 bytes per element."


def _lead(count: float) -> str:
    """A count opening a sentence with its article ("An 8.9e+10", "A 3e+10")."""
    text = f"{count:.6g}"
    return f"{'An' if text.startswith(('8', '11', '18')) else 'A'} {text}"


def _plain(value: float) -> str:
    """A dimensionless key (a fraction, a ratio, a probability)."""
    return repr(float(value))


def _gen(name: str, prompt: str, gold: tuple[str, ...], chapter: str, tags: tuple[str, ...],
         params: dict[str, Any]) -> Generated:
    return Generated(prompt, gold, chapter, tags, params)


# ---- speculative sampling ---------------------------------------------------------------------

SPEC_TAGS = ("inference.latency-throughput", "inference.engine")


def _spec_rules(k: int, p: float) -> str:
    return (
        f"A small draft model proposes {k} tokens, then the target model checks all of them in one "
        f"forward pass. Each drafted token is accepted independently with probability {p}; checking "
        "stops at the first rejected token, and the target pass always adds one token of its own (the "
        "replacement for the rejected token, or the next token when every draft was accepted)."
    )


def oracle_spec_tokens(k: int, p: float) -> tuple[float, ...]:
    expected = 0.0
    for i in range(k + 1):
        expected += p**i
    return (expected,)


def spec_tokens(d: Draws) -> Generated:
    k, p = d.integer(2, 12), d.integer(300, 980) / 1000
    prompt = f"{_spec_rules(k, p)} On average, how many tokens does one target pass produce? {ANSWER_ONE}"
    params: dict[str, Any] = {"k": k, "p": p}
    return _gen("spec_tokens", prompt, (_q(oracle_spec_tokens(**params)[0], "tokens"),), "inference", SPEC_TAGS, params)


def oracle_spec_speedup(k: int, p: float, t_target: float, t_draft: float) -> tuple[float, ...]:
    per_pass = (1 - p ** (k + 1)) / (1 - p)
    return (per_pass * t_target / (k * t_draft + t_target),)


def spec_speedup(d: Draws) -> Generated:
    k, p = d.integer(2, 12), d.integer(300, 980) / 1000
    t_target = d.integer(5, 80) / 1000
    t_draft = round(t_target * d.integer(2, 30) / 100, 6)
    prompt = (
        f"{_spec_rules(k, p)} A target pass takes {t_target} s whether it checks drafts or not, and "
        f"the draft model takes {t_draft} s per drafted token. Without speculation the target "
        "produces one token per pass. By what factor does speculation shorten the average time per "
        "generated token (plain time per token divided by speculative time per token; a value below "
        f"1 means it is slower)? Give a plain number. {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"k": k, "p": p, "t_target": t_target, "t_draft": t_draft}
    return _gen("spec_speedup", prompt, (_plain(oracle_spec_speedup(**params)[0]),), "inference", SPEC_TAGS, params)


def oracle_spec_breakeven(k: int, p: float, t_target: float) -> tuple[float, ...]:
    # a pass yields sum p^i tokens (i = 0..k) for t_target + k * t_draft; plain decoding yields 1 per t_target
    extra = sum(p**i for i in range(1, k + 1))
    return (t_target * extra / k,)


def spec_breakeven(d: Draws) -> Generated:
    # The key is a time, not the acceptance rate: a rate lives in (0, 1), where one constant answer
    # sat within 2% of 6% of the keys (tests/tasks/synthetic/test_attack_v2.py).
    k, p = d.integer(2, 12), d.integer(300, 980) / 1000
    t_target = d.integer(5, 80) / 1000
    prompt = (
        f"{_spec_rules(k, p)} A target pass takes {t_target} s whether it checks drafts or not; "
        "without speculation the target produces one token per pass. What is the largest time per "
        "drafted token the draft model may take for speculation to be no slower per generated token "
        f"than plain decoding? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"k": k, "p": p, "t_target": t_target}
    return _gen("spec_breakeven", prompt, (_q(oracle_spec_breakeven(**params)[0], "s"),), "inference", SPEC_TAGS,
                params)


# ---- FlashAttention and the cost of softmax and norms -----------------------------------------

def oracle_flash_kv_reads(batch: int, heads: int, seq: int, head_dim: int, q_tile: int) -> tuple[float, ...]:
    passes = seq // q_tile  # each query tile streams its head's whole K and V
    return (float(batch * heads * passes * 2 * seq * head_dim * 2),)


def flash_kv_reads(d: Draws) -> Generated:
    batch, heads = d.integer(1, 32), d.integer(4, 96)
    seq, head_dim = d.choice((4096, 8192, 16384, 32768, 65536)), d.choice((64, 128, 256))
    q_tile = d.choice((64, 128, 256, 512))
    prompt = (
        f"A fused attention kernel (FlashAttention style, no causal mask) runs one layer with batch "
        f"{batch}, {heads} heads of dimension {head_dim} and sequence length {seq}; Q, K and V are bf16 "
        f"(2 bytes per element) in HBM. The kernel takes the queries in tiles of {q_tile} rows; for "
        "each query tile it streams that head's keys and values through on-chip memory from HBM, "
        "keeping nothing between query tiles, and never writes the score matrix to HBM. How many bytes "
        f"of K and V does the layer read from HBM? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "q_tile": q_tile}
    return _gen("flash_kv_reads", prompt, (_q(oracle_flash_kv_reads(**params)[0], "bytes"),), "transformers",
                ("transformers.attention", "inference.attention-roofline"), params)


def oracle_softmax_share(head_dim: int, softmax_flops: int) -> tuple[float, ...]:
    matmul = 4 * head_dim  # QK^T and PV per score element
    return (softmax_flops / (softmax_flops + matmul),)


def softmax_share(d: Draws) -> Generated:
    seq, heads = d.choice((2048, 4096, 8192, 32768)), d.choice((8, 16, 32, 64, 96))
    head_dim, softmax_flops = d.multiple(32, 256, 16), d.integer(3, 40)
    prompt = (
        f"An attention layer has {heads} heads of dimension {head_dim} and no causal mask, over "
        f"{seq} tokens. Count the FLOPs of the attention itself (the scores QK^T, the softmax and the "
        f"weighted sum with V, not the projections): a multiply-add is 2 FLOPs and the softmax costs "
        f"{softmax_flops} FLOPs per score element. What fraction of those FLOPs is the softmax? Give a "
        f"plain number. {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"seq": seq, "heads": heads, "head_dim": head_dim, "softmax_flops": softmax_flops}
    return _gen("softmax_share", prompt, (_plain(oracle_softmax_share(head_dim, softmax_flops)[0]),),
                "transformers", ("transformers.attention",), params)


def oracle_norm_share(tokens: int, d_model: int, d_ff: int, norm_flops: int, peak: float,
                      hbm: float) -> tuple[float, ...]:
    norm = max(2 * 2 * tokens * d_model / hbm, norm_flops * tokens * d_model / peak)
    matmul = max(2 * tokens * d_model * d_ff / peak, 2 * (tokens * d_model + d_model * d_ff + tokens * d_ff) / hbm)
    return (norm / (norm + matmul),)


def norm_share(d: Draws) -> Generated:
    chip = d.choice(COMPUTE_CHIPS)
    assert chip.bf16_flops is not None
    tokens, d_model = d.choice((16, 64, 256, 1024, 4096, 16384)), d.multiple(2048, 16384, 1024)
    d_ff, norm_flops = d_model * d.choice((2, 3, 4)), d.integer(3, 8)
    prompt = (
        f"On {'an' if chip.name[0] in 'AEHIO' else 'a'} {chip.name} ({chip.bf16_flops:.6g} bf16 FLOP/s, "
        f"{chip.hbm_bandwidth:.6g} bytes/s of HBM bandwidth), an RMSNorm over activations [{tokens}, "
        f"{d_model}] is followed by a matmul with weights [{d_model}, {d_ff}]. The two run as separate "
        "kernels, one after the other. The norm reads its input and writes its output once "
        f"({norm_flops} FLOPs per element; ignore its scale vector); the matmul reads its input and "
        "weights and writes its output once. Everything is bf16 (2 bytes), a multiply-add is 2 FLOPs, "
        "and within each kernel compute and memory traffic overlap at peak rates. What fraction of the "
        f"two kernels' time is the norm? Give a plain number. {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"tokens": tokens, "d_model": d_model, "d_ff": d_ff, "norm_flops": norm_flops,
              "peak": chip.bf16_flops, "hbm": chip.hbm_bandwidth}
    return _gen("norm_share", prompt, (_plain(oracle_norm_share(**params)[0]),), "transformers",
                ("transformers.attention", "roofline.time-bounds"), params)


# ---- causal masking -----------------------------------------------------------------------------

CAUSAL_TAGS = ("transformers.attention-context", "transformers.attention")


def oracle_causal_flops(batch: int, layers: int, heads: int, head_dim: int, seq: int) -> tuple[float, ...]:
    scores = seq * (seq + 1) // 2  # query i sees keys 1..i
    return (float(batch * layers * heads * scores * 4 * head_dim),)


def causal_flops(d: Draws) -> Generated:
    batch, layers = d.choice((1, 2, 4, 8, 16, 32)), d.choice((12, 24, 32, 48, 64, 80))
    heads, head_dim = d.choice((8, 16, 32, 64)), d.choice((64, 128))
    seq = d.integer(100, 8192)
    prompt = (
        f"A decoder processes a batch of {batch} sequences of {seq} tokens each in one forward pass "
        f"(prefill). It has {layers} layers with {heads} attention heads of dimension {head_dim} and a "
        "causal mask, and the attention kernel skips every score the mask removes: nothing is computed "
        "for a query and a later key. Counting only the score and value products of attention (not the "
        "projections or the softmax), with a multiply-add as 2 FLOPs, how many FLOPs is that? "
        + ANSWER_ONE
    )
    params: dict[str, Any] = {"batch": batch, "layers": layers, "heads": heads, "head_dim": head_dim, "seq": seq}
    return _gen("causal_flops", prompt, (_q(oracle_causal_flops(**params)[0], "FLOPs"),), "transformers",
                CAUSAL_TAGS, params)


def oracle_causal_tiles(seq: int, tile: int) -> tuple[float, ...]:
    m = seq // tile
    computed_tiles = m * (m + 1) // 2  # tiles with at least one unmasked score
    masked_in_computed = m * tile * (tile - 1) // 2  # above the diagonal inside diagonal tiles
    return (computed_tiles / (m * m), masked_in_computed / (computed_tiles * tile * tile))


def causal_tiles(d: Draws) -> Generated:
    tile = d.choice((64, 128, 256, 512))
    seq = tile * d.integer(2, 128)
    prompt = (
        f"A causal attention kernel splits the [{seq}, {seq}] score matrix of one head into square "
        f"tiles of {tile} by {tile}. It skips a tile only when the mask removes every score in it; "
        "any other tile it computes in full and masks afterwards. What fraction of all tiles does it "
        "compute, and what fraction of the scores it computes does the mask then throw away? Give "
        "both as plain numbers. End with one line `Final answer: <fraction of tiles>, <fraction "
        "thrown away>`."
    )
    params: dict[str, Any] = {"seq": seq, "tile": tile}
    return _gen("causal_tiles", prompt, tuple(_plain(v) for v in oracle_causal_tiles(seq, tile)), "transformers",
                ("transformers.attention-context",), params)


def oracle_causal_prefill(params: float, layers: int, heads: int, head_dim: int, seq: int,
                          peak: float) -> tuple[float, ...]:
    dense = 2 * params * seq
    attention = layers * heads * 4 * head_dim * seq * (seq + 1) / 2
    return ((dense + attention) / peak,)


def causal_prefill(d: Draws) -> Generated:
    chip = d.choice(COMPUTE_CHIPS)
    assert chip.bf16_flops is not None
    n_params = d.integer(1, 70) * 1e9
    layers, heads, head_dim = d.choice((16, 32, 48, 64, 80)), d.choice((16, 32, 64)), d.choice((64, 128))
    seq = d.choice((8192, 16384, 32768, 65536, 131072))
    prompt = (
        f"{_lead(n_params)}-parameter decoder ({layers} layers, {heads} heads of dimension {head_dim}, "
        f"causal attention whose kernel computes no masked score) prefills one sequence of {seq} "
        f"tokens on one {chip.name} at its peak {chip.bf16_flops:.6g} bf16 FLOP/s. Count 2 FLOPs per "
        "parameter per token for the weight matmuls, plus the attention's score and value products "
        "(a multiply-add is 2 FLOPs); ignore the softmax and memory traffic. How long does the "
        f"prefill take? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"params": n_params, "layers": layers, "heads": heads, "head_dim": head_dim, "seq": seq,
              "peak": chip.bf16_flops}
    return _gen("causal_prefill", prompt, (_q(oracle_causal_prefill(**params)[0], "s"),), "transformers",
                CAUSAL_TAGS, params)


# ---- latency against throughput ---------------------------------------------------------------

LT_TAGS = ("inference.latency-throughput", "inference.prefill-decode")


def _decode_setup(d: Draws) -> dict[str, Any]:
    chip = d.choice(COMPUTE_CHIPS)
    assert chip.bf16_flops is not None
    return {"params": d.integer(7, 400) * 1e9, "weight_bytes": d.choice((1, 2)), "chips": d.choice((4, 8, 16, 32)),
            "kv": d.integer(1, 64) * 1e7, "peak": chip.bf16_flops, "hbm": chip.hbm_bandwidth,
            "hbm_bytes": chip.hbm_bytes, "chip": chip.name}


def _decode_text(s: dict[str, Any]) -> str:
    return (
        f"{_lead(s['params'])}-parameter dense model with {s['weight_bytes']}-byte weights decodes on "
        f"{s['chips']} {s['chip']} chips ({s['peak']:.6g} FLOP/s and {s['hbm']:.6g} bytes/s of HBM "
        f"bandwidth each), weights and KV caches sharded evenly. Each sequence's KV cache holds "
        f"{s['kv']:.6g} bytes. A decode step reads every weight and every sequence's KV cache from HBM "
        "once and does 2 FLOPs per parameter per sequence; compute and memory traffic overlap."
    )


def oracle_lt_point(params: float, weight_bytes: int, chips: int, kv: float, peak: float, hbm: float,
                    batch: int) -> tuple[float, ...]:
    step = max((weight_bytes * params + batch * kv) / (chips * hbm), 2 * params * batch / (chips * peak))
    return (step, batch / step)


def lt_point(d: Draws) -> Generated:
    s = _decode_setup(d)
    batch = d.choice((1, 4, 16, 32, 64, 128, 256, 512, 1024))
    prompt = (
        f"{_decode_text(s)} At a batch of {batch} sequences, what is the time of one decode step and "
        "the throughput in generated tokens per second over all chips? "
        + _answer_many("<step time> <unit>", "<throughput> tokens/s")
    )
    params: dict[str, Any] = {k: s[k] for k in ("params", "weight_bytes", "chips", "kv", "peak",
        "hbm")} | {"batch": batch}
    step, rate = oracle_lt_point(**params)
    return _gen("lt_point", prompt, (_q(step, "s"), _q(rate, "tokens/s")), "inference", LT_TAGS, params)


def oracle_lt_knee(params: float, weight_bytes: int, kv: float, peak: float, hbm: float) -> tuple[float, ...]:
    # smallest integer batch whose compute time reaches its memory time (chips cancel)
    return (float(math.ceil(weight_bytes * params / (2 * params * hbm / peak - kv))),)


def lt_knee(d: Draws) -> Generated:
    s = _decode_setup(d)
    # keep the KV cache small enough that some batch is compute-bound
    s["kv"] = float(f"{2 * s['params'] * s['hbm'] / s['peak'] * d.integer(0, 90) / 100:.3g}")
    prompt = (
        f"{_decode_text(s)} From what batch size on (the smallest whole number of sequences) does a "
        f"step's compute take at least as long as its memory traffic? {ANSWER_ONE.replace('<unit>', 'sequences')}"
    )
    params: dict[str, Any] = {k: s[k] for k in ("params", "weight_bytes", "kv", "peak", "hbm")} | {"chips": s["chips"]}
    knee = oracle_lt_knee(**{k: s[k] for k in ("params", "weight_bytes", "kv", "peak", "hbm")})
    return _gen("lt_knee", prompt, (_q(knee[0], "sequences"),), "inference", LT_TAGS, params)


def oracle_lt_max_batch(params: float, weight_bytes: int, chips: int, kv: float, peak: float, hbm: float,
                        hbm_bytes: float, target: float) -> tuple[float, ...]:
    fits = math.floor((chips * hbm_bytes - weight_bytes * params) / kv)
    by_memory_time = math.floor((target * chips * hbm - weight_bytes * params) / kv)
    by_compute_time = math.floor(target * chips * peak / (2 * params))
    return (float(min(fits, by_memory_time, by_compute_time)),)


def lt_max_batch(d: Draws) -> Generated:
    s = _decode_setup(d)
    while s["weight_bytes"] * s["params"] > 0.7 * s["chips"] * s["hbm_bytes"]:
        s["chips"] *= 2  # the weights must leave room for caches
    # a latency target that some batch between 8 and 512 just meets on memory traffic
    wanted = d.integer(8, 2048)
    target = float(f"{(s['weight_bytes'] * s['params'] + wanted * s['kv']) / (s['chips'] * s['hbm']) * 1.001:.4g}")
    prompt = (
        f"{_decode_text(s)} Each chip has {s['hbm_bytes']:.6g} bytes of HBM for weights and caches. What is "
        f"the largest batch (whole sequences) whose decode step takes at most {target} s and whose "
        f"caches fit? {ANSWER_ONE.replace('<unit>', 'sequences')}"
    )
    params: dict[str, Any] = {k: s[k] for k in ("params", "weight_bytes", "chips", "kv", "peak", "hbm", "hbm_bytes")}
    params["target"] = target
    return _gen("lt_max_batch", prompt, (_q(oracle_lt_max_batch(**params)[0], "sequences"),), "inference",
                (*LT_TAGS, "inference.memory"), params)


# ---- the expert-parallel AllToAll ----------------------------------------------------------------

MOE_TAGS = ("gpus.collectives", "sharding.alltoall")


def oracle_moe_dispatch(tokens: int, top_k: int, d_model: int, gpus: int, nvlink: float) -> tuple[float, ...]:
    leaving = tokens * top_k * (gpus - 1) / gpus  # routed copies bound for another GPU
    return (leaving * d_model * 2 / nvlink,)


def moe_dispatch(d: Draws) -> Generated:
    chip = d.choice(GPUS_WITH_NVLINK)
    assert chip.nvlink_bandwidth is not None
    tokens, top_k = d.multiple(512, 16384, 256), d.choice((1, 2, 4, 6, 8))
    d_model, gpus = d.multiple(1024, 8192, 128), 8
    prompt = (
        f"A mixture-of-experts layer runs on one node of {gpus} {chip.name} GPUs, experts spread evenly "
        f"over them; each GPU sends and receives {chip.nvlink_bandwidth:.6g} bytes/s over NVLink at the "
        f"same time. Each GPU holds {tokens} tokens of width {d_model} in bf16 (2 bytes), each routed to "
        f"{top_k} experts chosen uniformly at random (a token routed to an expert on its own GPU does not "
        "travel). How long does the dispatch AllToAll (sending the tokens to their experts, one way, not "
        f"the return) take, ignoring latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"tokens": tokens, "top_k": top_k, "d_model": d_model, "gpus": gpus,
        "nvlink": chip.nvlink_bandwidth}
    return _gen("moe_dispatch", prompt, (_q(oracle_moe_dispatch(**params)[0], "s"),), "gpus", MOE_TAGS, params)


def oracle_moe_ratio(d_ff: int, gpus: int, nvlink: float, peak: float) -> tuple[float, ...]:
    compute_per_copy = 2 * 3 * d_ff / peak  # per unit of width: three D x F matrices
    comms_per_copy = 2 * 2 * (gpus - 1) / gpus / nvlink  # out and back, bf16
    return (compute_per_copy / comms_per_copy,)


def moe_ratio(d: Draws) -> Generated:
    chip = d.choice(GPUS_WITH_NVLINK)
    assert chip.nvlink_bandwidth is not None and chip.bf16_flops is not None
    tokens, top_k = d.choice((2048, 4096, 8192)), d.choice((1, 2, 4, 8))
    d_model, d_ff, gpus = d.multiple(2048, 8192, 512), d.multiple(512, 16384, 64), d.choice((4, 8))
    prompt = (
        f"An expert-parallel MoE layer runs over {gpus} {chip.name} GPUs of one node ({chip.bf16_flops:.6g} "
        f"bf16 FLOP/s each; each sends and receives {chip.nvlink_bandwidth:.6g} bytes/s over NVLink at "
        f"once). Each GPU holds {tokens} tokens of width D = {d_model} in bf16, each routed to {top_k} "
        "experts chosen uniformly at random; a token whose expert is on its own GPU does not travel. "
        f"Every expert is a gated MLP of three D by F matrices with F = {d_ff}. The forward pass sends "
        "tokens to their experts and the results back (two AllToAlls). How many times longer is the "
        "experts' matmul time than the two AllToAlls' time, both at peak rates? Give a plain number. "
        + ANSWER_ONE.replace(" <unit>", "")
    )
    params: dict[str, Any] = {"tokens": tokens, "top_k": top_k, "d_model": d_model, "d_ff": d_ff, "gpus": gpus,
              "nvlink": chip.nvlink_bandwidth, "peak": chip.bf16_flops}
    ratio = oracle_moe_ratio(d_ff, gpus, chip.nvlink_bandwidth, chip.bf16_flops)
    return _gen("moe_ratio", prompt, (_plain(ratio[0]),), "gpus", (*MOE_TAGS, "gpus.rooflines"), params)


def oracle_moe_cross_node(tokens: int, top_k: int, d_model: int, nodes: int, nic_gbit: int) -> tuple[float, ...]:
    leaving = tokens * top_k * (nodes - 1) / nodes
    return (leaving * d_model * 2 / (nic_gbit * 1e9 / 8),)


def moe_cross_node(d: Draws) -> Generated:
    tokens, top_k = d.multiple(512, 16384, 256), d.choice((1, 2, 4, 8))
    d_model, nodes, nic = d.multiple(1024, 8192, 128), d.choice((2, 3, 4, 6, 8, 16, 32)), d.choice(NIC_BITS)
    prompt = (
        f"Experts of an MoE layer are spread evenly over {nodes} nodes of 8 H100 GPUs. Each GPU holds "
        f"{tokens} tokens of width {d_model} in bf16 (2 bytes), each routed to {top_k} experts chosen "
        "uniformly at random. Traffic inside a node goes over NVLink and is hidden; traffic to another "
        f"node leaves through the sending GPU's own NIC at {nic} Gbit/s. How long does the dispatch "
        f"AllToAll (one way) take, ignoring latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"tokens": tokens, "top_k": top_k, "d_model": d_model, "nodes": nodes, "nic_gbit": nic}
    return _gen("moe_cross_node", prompt, (_q(oracle_moe_cross_node(**params)[0], "s"),), "gpus",
                (*MOE_TAGS, "gpus.networking"), params)


# ---- zero-bubble pipelines ---------------------------------------------------------------------

PIPE_TAGS = ("training.pipeline-dcn",)


def _pipe_text(stages: int, micro: int | None) -> str:
    batch = f" with {micro} microbatches per step" if micro else ""
    return (
        f"A model is split into {stages} pipeline stages of equal cost{batch}, run with a plain "
        "one-forward-one-backward schedule (no interleaving, no split of the backward pass): a stage "
        "works on a microbatch's forward only after the previous stage finished it, and on its backward "
        "only after the next stage finished that."
    )


def oracle_pipe_idle(stages: int, micro: int) -> tuple[float, ...]:
    return ((stages - 1) / (micro + stages - 1),)


def pipe_idle(d: Draws) -> Generated:
    stages, micro = d.choice((2, 4, 6, 8, 12, 16, 24, 32, 48, 64)), d.integer(1, 256)
    prompt = (
        f"{_pipe_text(stages, micro)} What fraction of each stage's step time is idle, the share a "
        f"zero-bubble schedule would recover? Give a plain number. {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"stages": stages, "micro": micro}
    return _gen("pipe_idle", prompt, (_plain(oracle_pipe_idle(**params)[0]),), "training", PIPE_TAGS, params)


def oracle_pipe_saving(stages: int, micro: int, fwd: float, bwd: float) -> tuple[float, ...]:
    plain = (micro + stages - 1) * (fwd + bwd)
    zero_bubble = micro * (fwd + bwd)
    return (plain - zero_bubble, plain / zero_bubble)


def pipe_saving(d: Draws) -> Generated:
    stages, micro = d.choice((4, 8, 16, 32, 64)), d.integer(4, 128)
    fwd = d.integer(5, 400) / 1000
    bwd = round(fwd * d.integer(15, 25) / 10, 6)
    prompt = (
        f"{_pipe_text(stages, micro)} A microbatch's forward takes {fwd} s on a stage and its backward "
        f"{bwd} s. A zero-bubble schedule (the backward split into input- and weight-gradient passes "
        "that fill every idle slot) leaves no stage idle. How much time per step does it save, and by "
        "what factor does it raise throughput? "
        "End with one line `Final answer: <time saved> <unit>, <factor>`."
    )
    params: dict[str, Any] = {"stages": stages, "micro": micro, "fwd": fwd, "bwd": bwd}
    saved, factor = oracle_pipe_saving(**params)
    return _gen("pipe_saving", prompt, (_q(saved, "s"), _plain(factor)), "training", PIPE_TAGS, params)


def oracle_pipe_micro(stages: int, idle_percent: int) -> tuple[float, ...]:
    x = idle_percent / 100
    return (float(math.ceil((stages - 1) * (1 - x) / x - 1e-9)),)


def pipe_micro(d: Draws) -> Generated:
    stages, idle = d.choice((3, 4, 6, 8, 12, 16, 24, 32, 48, 64)), d.integer(1, 30)
    prompt = (
        f"{_pipe_text(stages, None)} Without a zero-bubble schedule, how many microbatches per step at "
        f"the least keep each stage's idle time at or below {idle}% of its step time? "
        + ANSWER_ONE.replace("<unit>", "microbatches")
    )
    params: dict[str, Any] = {"stages": stages, "idle_percent": idle}
    return _gen("pipe_micro", prompt, (_q(oracle_pipe_micro(**params)[0], "microbatches"),), "training", PIPE_TAGS,
                params)


# ---- GB200 NVL72 ---------------------------------------------------------------------------------

NVL_TAGS = ("gpus.networking", "gpus.collectives")


def _rack_text(racks: int | None = None) -> str:
    where = f"{racks} GB200 NVL72 racks" if racks else "one GB200 NVL72 rack"
    return (
        f"{where} ({NVL72_GPUS} B200 GPUs in one NVLink domain per rack; each GPU sends and receives "
        f"{NVL72_NVLINK:.6g} bytes/s over NVLink at once, to any other GPU of its rack)"
    )


def oracle_nvl_allgather(shard: float) -> tuple[float, ...]:
    return (shard * (NVL72_GPUS - 1) / NVL72_NVLINK,)


def nvl_allgather(d: Draws) -> Generated:
    # The prompt states one GPU's shard: stating the whole array made array / bandwidth (two of the
    # prompt's numbers) a right answer, the (G - 1) / G factor being under 2% at G = 72.
    shard = d.integer(1, 999) * 10.0 ** d.integer(6, 8)
    prompt = (
        f"On {_rack_text()}, every GPU holds its own {shard:.6g}-byte shard of an array. "
        "How long does a bandwidth-optimal AllGather that leaves the whole array on every GPU take, "
        f"ignoring latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"shard": shard, "gpus": NVL72_GPUS, "nvlink": NVL72_NVLINK}
    return _gen("nvl_allgather", prompt, (_q(oracle_nvl_allgather(shard)[0], "s"),), "gpus", NVL_TAGS, params)


def oracle_nvl_allreduce(nbytes: float, racks: int, rack_egress: float) -> tuple[float, ...]:
    inside = 2 * nbytes * (NVL72_GPUS - 1) / NVL72_GPUS / NVL72_NVLINK  # ReduceScatter, later AllGather
    shard = nbytes / NVL72_GPUS
    across = 2 * shard * (racks - 1) / racks / (rack_egress / NVL72_GPUS)
    return (inside + across,)


def nvl_allreduce(d: Draws) -> Generated:
    nbytes = d.integer(1, 999) * 10.0 ** d.integer(7, 9)  # up to a 500e9-parameter model's bf16 gradient
    racks = d.choice((2, 4, 8, 16, 32))
    # Each GPU holds a whole gradient: "a rack's gradient, sharded evenly over its GPUs" left nothing
    # to sum within a rack, and read literally made the key the cross-rack phase alone.
    prompt = (
        f"{_rack_text(racks)[0].upper()}{_rack_text(racks)[1:]} are joined by a scale-out network: each "
        f"rack sends {NVL72_RACK_EGRESS:.6g} bytes/s to it in all, an equal share through each GPU's NIC, "
        "and its switches never limit. "
        f"Every GPU of every rack holds its own {nbytes:.6g}-byte gradient (pure data parallelism), and "
        "every GPU must end with the sum over all GPUs of all racks, computed by a hierarchical AllReduce "
        "(first within each rack, then across racks, then within each rack again), every phase "
        "bandwidth-optimal. How long does it "
        f"take, ignoring latency, with the phases one after another? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"nbytes": nbytes, "racks": racks, "rack_egress": NVL72_RACK_EGRESS, "gpus": NVL72_GPUS,
              "nvlink": NVL72_NVLINK}
    return _gen("nvl_allreduce", prompt,
                (_q(oracle_nvl_allreduce(nbytes, racks, NVL72_RACK_EGRESS)[0], "s"),), "gpus", NVL_TAGS, params)


def oracle_nvl_rack_to_rack(nbytes: float, nic_gbit: int) -> tuple[float, ...]:
    return (nbytes / (NVL72_GPUS * nic_gbit * 1e9 / 8),)


def nvl_rack_to_rack(d: Draws) -> Generated:
    nbytes, nic = d.integer(1, 999) * 10.0 ** d.integer(9, 12), d.choice(NIC_BITS)
    prompt = (
        f"{_rack_text()[0].upper()}{_rack_text()[1:]} holds {nbytes:.6g} bytes spread evenly over its "
        f"GPUs and must send all of it to a second such rack. Each GPU has its own {nic} Gbit/s NIC to "
        "the scale-out network, whose switches never limit. How long does the transfer take, ignoring "
        f"latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"nbytes": nbytes, "nic_gbit": nic, "gpus": NVL72_GPUS}
    return _gen("nvl_rack_to_rack", prompt, (_q(oracle_nvl_rack_to_rack(nbytes, nic)[0], "s"),), "gpus",
                ("gpus.networking", "gpus.fat-tree"), params)


# ---- backward-pass communication -------------------------------------------------------------

def _ring_text(chips: int, chip: str, bidi: float) -> str:
    return (
        f"{chips} {chip} chips form one ring with wraparound; each chip sends {bidi:.6g} bytes/s in "
        "all over its two ICI links at once, and collectives use the bandwidth-optimal ring algorithms"
    )


def oracle_bwd_dp(params: float, grad_bytes: int, chips: int, bidi: float) -> tuple[float, ...]:
    return (2 * grad_bytes * params * (chips - 1) / chips / bidi,)


def bwd_dp(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.ici_bandwidth_bidi is not None
    n_params, chips = d.integer(1, 999) * 10.0 ** d.integer(7, 9), d.choice((4, 8, 16, 32))
    name, grad_bytes = d.choice((("bf16", 2), ("fp32", 4)))
    prompt = (
        f"{_lead(n_params)}-parameter model is trained with pure data parallelism. "
        f"{_ring_text(chips, chip.name, chip.ici_bandwidth_bidi)}. "
        f"After the backward pass every chip holds its own {name} gradient ({grad_bytes} bytes per "
        "parameter) and the chips must end with their sum. How long does that communication take, "
        f"ignoring latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"params": n_params, "grad_bytes": grad_bytes, "chips": chips,
        "bidi": chip.ici_bandwidth_bidi}
    return _gen("bwd_dp", prompt, (_q(oracle_bwd_dp(**params)[0], "s"),), "training", ("training.data-parallel",),
                params)


def oracle_bwd_fsdp(params: float, chips: int, bidi: float) -> tuple[float, ...]:
    gather = 2 * params * (chips - 1) / chips / bidi  # the weights again, bf16
    reduce = 2 * params * (chips - 1) / chips / bidi  # the gradients' shards, bf16
    return (gather + reduce,)


def bwd_fsdp(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.ici_bandwidth_bidi is not None
    n_params, chips = d.integer(1, 999) * 10.0 ** d.integer(7, 9), d.choice((8, 16, 32, 64))
    prompt = (
        f"{_lead(n_params)}-parameter model is trained with FSDP (ZeRO-3): weights, gradients and "
        f"optimizer state are sharded over all chips, and no chip keeps gathered weights from the "
        f"forward pass. {_ring_text(chips, chip.name, chip.ici_bandwidth_bidi)}. Weights and gradients "
        "travel in bf16 (2 bytes). How long is the communication of the backward pass of one step, "
        f"summed over all layers, ignoring latency and overlap? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"params": n_params, "chips": chips, "bidi": chip.ici_bandwidth_bidi}
    return _gen("bwd_fsdp", prompt, (_q(oracle_bwd_fsdp(**params)[0], "s"),), "training", ("training.fsdp",), params)


def oracle_bwd_tp(layers: int, tokens: int, d_model: int, chips: int, bidi: float) -> tuple[float, ...]:
    per_layer = 2 * (2 * tokens * d_model) * (chips - 1) / chips / bidi  # the input gradient's AllReduce
    return (layers * per_layer,)


def bwd_tp(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.ici_bandwidth_bidi is not None
    layers, tokens = d.choice((16, 32, 48, 64, 96)), d.choice((2048, 4096, 8192, 16384, 32768))
    d_model, chips = d.multiple(2048, 16384, 1024), d.choice((2, 4, 8, 16))
    prompt = (
        f"The MLP blocks of a {layers}-layer model (width D = {d_model}) are tensor-parallel over "
        f"{chips} chips in the Megatron layout: the first matrix split by columns, the second by rows, "
        f"every chip holding all {tokens} tokens of the batch in bf16 (2 bytes). "
        f"{_ring_text(chips, chip.name, chip.ici_bandwidth_bidi)}. How long is the MLP blocks' "
        f"communication in the backward pass, over all layers, ignoring latency? {ANSWER_ONE}"
    )
    params: dict[str, Any] = {"layers": layers, "tokens": tokens, "d_model": d_model, "chips": chips,
        "bidi": chip.ici_bandwidth_bidi}
    return _gen("bwd_tp", prompt, (_q(oracle_bwd_tp(**params)[0], "s"),), "training",
                ("training.tensor-parallel",), params)


def oracle_bwd_dp_batch(chips: int, grad_bytes: int, bidi: float, peak: float,
                        utilisation_percent: int) -> tuple[float, ...]:
    # backward FLOPs 4 per parameter per token against the gradient's AllReduce; parameters cancel
    sustained = peak * utilisation_percent / 100
    return (sustained * 2 * grad_bytes * (chips - 1) / chips / (4 * bidi),)


def bwd_dp_batch(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.ici_bandwidth_bidi is not None and chip.bf16_flops is not None
    n_params, chips = d.integer(1, 999) * 10.0 ** d.integer(7, 9), d.integer(2, 12)
    name, grad_bytes = d.choice((("bf16", 2), ("fp32", 4)))
    # A sustained share of peak: without it the key took one of a few hundred values (chip, chips,
    # bytes), and one constant answer sat within 2% of 6.5% of them (test_attack_v2.py).
    utilisation = d.integer(30, 80)
    prompt = (
        f"{_lead(n_params)}-parameter model is trained with pure data parallelism. "
        f"{_ring_text(chips, chip.name, chip.ici_bandwidth_bidi)}; "
        f"each chip peaks at {chip.bf16_flops:.6g} bf16 FLOP/s and sustains {utilisation}% of that in the "
        f"backward pass. The backward pass costs 4 FLOPs per parameter per token, and the {name} gradients "
        f"({grad_bytes} bytes per parameter) are summed over the chips "
        "while it runs. How many tokens per chip per step must the batch hold at the least for the "
        f"backward pass's compute to take as long as that communication? {ANSWER_ONE.replace('<unit>', 'tokens')}"
    )
    params: dict[str, Any] = {"params": n_params, "chips": chips, "grad_bytes": grad_bytes,
                              "bidi": chip.ici_bandwidth_bidi, "peak": chip.bf16_flops,
                              "utilisation_percent": utilisation}
    batch = oracle_bwd_dp_batch(chips, grad_bytes, chip.ici_bandwidth_bidi, chip.bf16_flops, utilisation)
    return _gen("bwd_dp_batch", prompt, (_q(batch[0], "tokens"),), "training", ("training.data-parallel",), params)


# ---- reading a profiler trace ------------------------------------------------------------------

COMPUTE_OPS = ("fusion", "convolution", "dot", "loop_fusion", "copy")
COLLECTIVE_OPS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


def oracle_trace_comms(events: list[tuple[str, float, float]]) -> tuple[float, ...]:
    start = min(ts for _, ts, _ in events)
    end = max(ts + dur for _, ts, dur in events)
    comms = sum(dur for name, _, dur in events if name.split(".")[0] in COLLECTIVE_OPS)
    return (comms / (end - start),)


def _trace_lines(events: list[tuple[str, float, float]]) -> str:
    return "\n".join(
        f'{{"name": "{name}", "ph": "X", "pid": 1, "tid": 2, "ts": {ts}, "dur": {dur}}}' for name, ts, dur in events
    )


def trace_comms(d: Draws) -> Generated:
    events: list[tuple[str, float, float]] = []
    ts = float(d.integer(1000, 90000))
    # how often a collective comes varies too: with every third op one, the shares gathered near
    # 0.3 and one constant answer scored 5% (tests/tasks/synthetic/test_attack_v2.py)
    every = d.integer(2, 5)
    for i in range(d.integer(5, 10)):
        ops = COLLECTIVE_OPS if i % every == 1 else COMPUTE_OPS
        dur = d.integer(50, 5000) / 10
        events.append((f"{d.choice(ops)}.{d.integer(1, 99)}", ts, dur))
        ts = round(ts + dur + d.integer(0, 400) / 10, 1)  # gaps: the chip waits
    prompt = (
        "These are the events of one training step on one TPU core, from the XLA Ops line of a "
        "profile in Chrome trace format (times in microseconds; the ops run one at a time, and the "
        "core is idle between them):\n\n"
        f"{_trace_lines(events)}\n\n"
        "What fraction of the time from the first op's start to the last op's end does the core "
        f"spend in collective communication? Give a plain number. {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"events": events}
    return _gen("trace_comms", prompt, (_plain(oracle_trace_comms(events)[0]),), "profiling",
                ("profiling.profiler",), params)


def oracle_trace_mfu(starts: list[float], params: float, tokens: int, chips: int, peak: float) -> tuple[float, ...]:
    step = (starts[-1] - starts[0]) / (len(starts) - 1) / 1e6  # microseconds to seconds
    return (6 * params * tokens / (step * chips * peak),)


def trace_mfu(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.bf16_flops is not None
    chips, n_params = d.choice((8, 16, 32, 64, 128, 256)), d.integer(1, 99) * 1e9
    tokens = d.choice((64, 128, 256, 512, 1024)) * 1024
    ideal = 6 * n_params * tokens / (chips * chip.bf16_flops)
    mfu = d.integer(150, 800) / 1000
    step_us = ideal / mfu * 1e6
    starts = [float(d.integer(1000, 50000))]
    for _ in range(d.integer(3, 6)):
        starts.append(round(starts[-1] + step_us * d.integer(95, 105) / 100, 1))
    lines = "\n".join(f'{{"name": "train_step", "ph": "X", "ts": {s}, "dur": {round(step_us * 0.97, 1)}}}'
                      for s in starts)
    prompt = (
        f"{_lead(n_params)}-parameter dense model trains on {chips} {chip.name} chips ({chip.bf16_flops:.6g} "
        f"bf16 FLOP/s each) with {tokens} tokens per step. The profile's Steps line shows these "
        f"consecutive step events (Chrome trace format, microseconds):\n\n{lines}\n\n"
        "Taking the mean time from one step's start to the next as the step time, what model FLOPs "
        "utilisation does the run reach? Count 6 FLOPs per parameter per token for a training step. "
        f"Give a plain number (a fraction of peak). {ANSWER_ONE.replace(' <unit>', '')}"
    )
    params: dict[str, Any] = {"starts": starts, "params": n_params, "tokens": tokens, "chips": chips,
        "peak": chip.bf16_flops}
    return _gen("trace_mfu", prompt, (_plain(oracle_trace_mfu(**params)[0]),), "profiling",
                ("profiling.profiler", "applied-training.duration"), params)


def oracle_trace_dot(m: int, k: int, n: int, micros: float, peak: float) -> tuple[float, ...]:
    return (2 * m * k * n / (micros / 1e6) / peak,)


def trace_dot(d: Draws) -> Generated:
    chip = d.choice(TPUS)
    assert chip.bf16_flops is not None
    m, k, n = d.multiple(128, 16384, 128), d.multiple(512, 16384, 256), d.multiple(512, 32768, 256)
    ideal_us = 2 * m * k * n / chip.bf16_flops * 1e6
    micros = round(ideal_us / (d.integer(20, 95) / 100), 1)
    op = d.integer(1, 400)
    hlo = (f"%dot.{op} = bf16[{m},{n}]{{1,0}} dot(bf16[{m},{k}]{{1,0}} %p0, bf16[{k},{n}]{{1,0}} %p1), "
           "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    prompt = (
        f"A profile of a step on one {chip.name} core ({chip.bf16_flops:.6g} bf16 FLOP/s at peak) shows "
        f"the op `dot.{op}` taking {micros} microseconds. Its line in the optimised HLO is:\n\n"
        f"    {hlo}\n\n"
        "What fraction of the core's peak FLOP/s does this op reach? Give a plain number. "
        + ANSWER_ONE.replace(" <unit>", "")
    )
    params: dict[str, Any] = {"m": m, "k": k, "n": n, "micros": micros, "peak": chip.bf16_flops}
    return _gen("trace_dot", prompt, (_plain(oracle_trace_dot(**params)[0]),), "profiling",
                ("profiling.profiler", "profiling.hlo"), params)


# The topic each family belongs to, in the order the slots are appended (docs/splits.md).
TOPICS: dict[str, tuple[Callable[[Draws], Generated], ...]] = {
    "speculative sampling": (spec_tokens, spec_speedup, spec_breakeven),
    "FlashAttention, softmax and norms": (flash_kv_reads, softmax_share, norm_share),
    "causal masking": (causal_flops, causal_tiles, causal_prefill),
    "latency against throughput": (lt_point, lt_knee, lt_max_batch),
    "expert-parallel AllToAll": (moe_dispatch, moe_ratio, moe_cross_node),
    "zero-bubble pipelines": (pipe_idle, pipe_saving, pipe_micro),
    "GB200 NVL72": (nvl_allgather, nvl_allreduce, nvl_rack_to_rack),
    "backward-pass communication": (bwd_dp, bwd_fsdp, bwd_tp, bwd_dp_batch),
    "reading a profiler trace": (trace_comms, trace_mfu, trace_dot),
}
TOPIC_FAMILIES: dict[str, Callable[[Draws], Generated]] = {f.__name__: f for fs in TOPICS.values() for f in fs}
# family -> the oracle that computes its key (what the difficulty tag counts).
ORACLES: dict[str, Callable[..., tuple[float, ...]]] = {
    name: globals()[f"oracle_{name}"] for name in TOPIC_FAMILIES
}


def oracle_arguments(family: str, params: dict[str, Any]) -> dict[str, Any]:
    """The drawn parameters the family's oracle takes (a prompt may state more: a figure the
    solver must see is irrelevant is data too)."""
    return {k: v for k, v in params.items() if k in inspect.signature(ORACLES[family]).parameters}


def key_values(family: str, params: dict[str, Any]) -> tuple[float, ...]:
    return ORACLES[family](**oracle_arguments(family, params))
