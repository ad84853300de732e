"""The scaling formulas, one function per rule in the book, shared by the exam's oracles and the
synthetic generator.

Every function is plain arithmetic on its arguments (no math.* calls), so the oracle tests can
trace the operations performed on the raw quantities of a question. Units: bytes, seconds,
FLOPs, FLOPs/s, bytes/s; counts (tokens, chips, parameters) are plain numbers."""

from __future__ import annotations

# ---- rooflines ------------------------------------------------------------------------------


def compute_time(flops: float, flops_per_s: float) -> float:
    return flops / flops_per_s


def comms_time(nbytes: float, bytes_per_s: float) -> float:
    return nbytes / bytes_per_s


def time_bounds(t_math: float, t_comms: float) -> tuple[float, float]:
    """(lower, upper): perfect overlap gives the max, no overlap the sum."""
    return max(t_math, t_comms), t_math + t_comms


def intensity(flops: float, nbytes: float) -> float:
    return flops / nbytes


def matmul_flops(b: float, d: float, f: float) -> float:
    return 2 * b * d * f


def matmul_bytes(b: float, d: float, f: float, bytes_per_elem: float) -> float:
    """Read both inputs, write the output."""
    return bytes_per_elem * (b * d + d * f + b * f)


def critical_batch(flops_per_s: float, hbm_bytes_per_s: float, weight_bytes: float) -> float:
    """Token batch above which a weight-loading-bound matmul becomes compute-bound: the matmul does
    2BDF FLOPs while loading DF weights of weight_bytes each."""
    return flops_per_s / hbm_bytes_per_s * weight_bytes / 2


# ---- collectives on a TPU ring / torus ------------------------------------------------------


def allgather_time(nbytes: float, bidi_link_bytes_per_s: float, n_axes: float = 1) -> float:
    """Bandwidth-bound AllGather (or ReduceScatter) of an array of nbytes over a full
    bidirectional ring: independent of the ring size; extra mesh axes add bandwidth."""
    return nbytes / (bidi_link_bytes_per_s * n_axes)


def allgather_time_latency(nbytes: float, bidi: float, axis: float, hop_latency: float) -> float:
    """Either bound by bandwidth or by the axis/2 hops each paying a fixed latency."""
    return max(hop_latency * axis / 2, nbytes / bidi)


def allreduce_time(nbytes: float, bidi: float, n_axes: float = 1) -> float:
    """ReduceScatter then AllGather: twice an AllGather."""
    return 2 * allgather_time(nbytes, bidi, n_axes)


def alltoall_time(nbytes: float, bidi: float) -> float:
    """Shards travel a quarter of the way round a bidirectional ring on average."""
    return allgather_time(nbytes, bidi) / 4


def torus_diameter(*axis_sizes: float) -> float:
    """Most hops between two chips of a torus with wraparound on every axis."""
    total: float = 0
    for n in axis_sizes:
        total = total + n // 2
    return total


# ---- transformer accounting -----------------------------------------------------------------


def mlp_params(d: float, f: float, n_matrices: float = 3) -> float:
    return n_matrices * d * f


def attention_params(d: float, n_heads: float, n_kv: float, head_dim: float) -> float:
    """Q and output projections (N heads) plus K and V projections (K heads)."""
    return 2 * d * n_heads * head_dim + 2 * d * n_kv * head_dim


def dense_params(
    layers: float, d: float, f: float, n_heads: float, n_kv: float, head_dim: float, vocab: float
) -> float:
    """Gated-MLP transformer with untied input and output embeddings; norms ignored."""
    per_layer = mlp_params(d, f) + attention_params(d, n_heads, n_kv, head_dim)
    return layers * per_layer + 2 * vocab * d


def training_flops(params: float, tokens: float) -> float:
    return 6 * params * tokens


def inference_flops(params: float, tokens: float) -> float:
    return 2 * params * tokens


def training_time(params: float, tokens: float, chips: float, flops_per_s: float, mfu: float) -> float:
    return training_flops(params, tokens) / (chips * flops_per_s * mfu)


def attention_to_matmul_flops(seq_len: float, d_model: float) -> float:
    """With F = 4D, D = NH and N = K, attention FLOPs over the matmul FLOPs is T / 8D."""
    return seq_len / (8 * d_model)


def kv_cache_bytes(seq_len: float, layers: float, n_kv: float, head_dim: float, bytes_per: float) -> float:
    """Keys and values for every layer and KV head."""
    return 2 * seq_len * layers * n_kv * head_dim * bytes_per


# ---- training parallelism -------------------------------------------------------------------


def dp_min_batch_per_chip(flops_per_s: float, bidi: float, n_axes: float) -> float:
    """Data parallelism and FSDP are compute-bound above C / (W * axes) tokens per chip."""
    return flops_per_s / (bidi * n_axes)


def tp_max_degree(d_ff: float, flops_per_s: float, bidi: float, n_axes: float) -> float:
    """Tensor parallelism stays compute-bound while Y < M_Y * F / (C / W)."""
    return n_axes * d_ff / (flops_per_s / bidi)


def mixed_min_batch_per_chip(flops_per_s: float, bidi: float, d_ff: float, axes_product: float) -> float:
    """FSDP + TP: B / N > alpha^2 / (M_X M_Y F) with alpha = C / W."""
    alpha = flops_per_s / bidi
    return alpha * alpha / (axes_product * d_ff)


def optimal_fsdp(batch: float, d_ff: float, m_x: float, m_y: float, chips: float) -> float:
    """X_opt = sqrt(B / F * M_X / M_Y * N)."""
    return (batch / d_ff * m_x / m_y * chips) ** 0.5


def pipeline_bubble(stages: float, microbatches: float) -> float:
    """Idle fraction of a simple (GPipe-style) schedule."""
    return (stages - 1) / (microbatches + stages - 1)


# ---- inference ------------------------------------------------------------------------------


def decode_step_time(param_bytes: float, kv_bytes: float, chips: float, hbm_bytes_per_s: float) -> float:
    """Memory-bound generation step: every chip streams its share of weights and KV caches."""
    return (param_bytes + kv_bytes) / (chips * hbm_bytes_per_s)
