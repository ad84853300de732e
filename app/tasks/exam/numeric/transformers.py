"""Transformer accounting: contraction FLOPs, parameter counts, 6ND, KV caches, MoE, remat."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "transformers.dot-flops", "FLOPs", """
    During training, a linear layer multiplies an activation of shape [{b}, {d}] by a weight of
    shape [{d}, {f}]. Counting the forward matmul and the two backward matmuls (the gradient for
    the weight and the gradient for the input), how many FLOPs does this layer cost per step?""",
    b=1048576, d=4096, f=14336)
def linear_training_flops(b, d, f):
    return 3 * fm.matmul_flops(b, d, f)


@numeric(2, "transformers.param-count", "params", """
    A decoder has {layers} layers, model width {d}, gated MLP width {f} (three weight matrices per
    MLP), {heads} query heads and {kv} key/value heads of size {hd}, and separate input and output
    embeddings over a vocabulary of {vocab}. Ignoring norms and biases, how many parameters does
    it have?""",
    layers=32, d=4096, f=14336, heads=32, kv=8, hd=128, vocab=128256)
def decoder_params(layers, d, f, heads, kv, hd, vocab):
    return fm.dense_params(layers, d, f, heads, kv, hd, vocab)


@numeric(3, "transformers.6nd", ("FLOPs", "s"), """
    A dense model with {params} parameters is trained on {tokens} tokens using {chips} chips of
    {peak} FLOPs/s each at a model FLOPs utilisation of {mfu} (as a fraction). Using the 6 FLOPs
    per parameter per token rule, give the total training FLOPs and then the training time.""",
    params=1.3e10, tokens=2e12, chips=1024, peak=4.59e14, mfu=0.45)
def six_nd(params, tokens, chips, peak, mfu):
    return fm.training_flops(params, tokens), fm.training_time(params, tokens, chips, peak, mfu)


@numeric(4, ("transformers.attention-context", "transformers.6nd"), "", """
    For a transformer with F = 4D, D = NH and as many key/value heads as query heads, the ratio of
    attention FLOPs to the FLOPs of the weight matmuls is T / (8D). What is that ratio for a model
    width D = {d} trained at sequence length T = {t}?""",
    d=4608, t=131072)
def attention_share(d, t):
    return fm.attention_to_matmul_flops(t, d)


@numeric(5, "transformers.kv-cache", "B", """
    A model has {layers} layers and {kv} key/value heads of dimension {hd}. Its cache stores keys
    and values at {b} bytes per element. How many bytes does the KV cache of one sequence of {s}
    tokens occupy?""",
    layers=64, kv=8, hd=128, b=2, s=32768)
def kv_bytes(layers, kv, hd, b, s):
    return fm.kv_cache_bytes(s, layers, kv, hd, b)


@numeric(6, ("transformers.attention", "inference.kv-reductions", "transformers.kv-cache"), "B", """
    A serving batch holds {batch} sequences of {s} tokens on a model with {layers} layers and head
    size {hd}, caching in bf16 ({b} bytes). Switching attention from {n} KV heads (one per query
    head) to {k} shared KV heads saves how many bytes of KV cache for the whole batch?""",
    batch=64, s=8192, layers=40, hd=128, b=2, n=40, k=8)
def gqa_saving(batch, s, layers, hd, b, n, k):
    return batch * (fm.kv_cache_bytes(s, layers, n, hd, b) - fm.kv_cache_bytes(s, layers, k, hd, b))


@numeric(7, "transformers.moe-remat", ("params", "params"), """
    Each of the {layers} layers of a mixture-of-experts model has {e} experts, every expert a gated
    MLP with width {d} and hidden size {f} (three matrices). Each token is routed to {k} experts.
    How many expert parameters does the model hold in total, and how many are used per token?
    (total first)""",
    layers=48, e=64, d=4096, f=1536, k=8)
def moe_params(layers, e, d, f, k):
    per_expert = fm.mlp_params(d, f)
    return layers * e * per_expert, layers * k * per_expert


@numeric(8, "training.memory", "B", """
    Training without any rematerialisation saves about {c} intermediate values of size D per token
    per layer, in bf16 ({b} bytes). For a batch of {tokens} tokens, width D = {d} and {layers}
    layers, how many bytes of activations must be kept for the backward pass?""",
    c=20, b=2, tokens=2097152, d=6144, layers=48)
def activation_bytes(c, b, tokens, d, layers):
    return c * b * tokens * d * layers


@numeric(9, ("training.memory", "transformers.6nd"), "FLOPs", """
    With block rematerialisation every forward pass is recomputed during the backward pass, so a
    step costs about {per} FLOPs per parameter per token instead of 6. For a {params}-parameter
    model and a {tokens}-token batch, how many extra FLOPs per step does remat cost?""",
    per=8, params=7e9, tokens=4194304)
def remat_extra(per, params, tokens):
    return per * params * tokens - fm.training_flops(params, tokens)


# ---- FlashAttention, and the cost of the softmax and the norms --------------------------------

@numeric(21, ("transformers.attention", "inference.attention-roofline"), "B", """
    An attention layer runs T = {t} queries against S = {s} keys for each of {heads} heads, with
    scores in bf16 ({b} bytes per element). A naive implementation writes every head's full score
    matrix to HBM and reads it back once; a fused (flash) kernel keeps the scores on chip. How many
    bytes of HBM traffic does the fused kernel save on the scores alone?""",
    t=8192, s=8192, heads=32, b=2)
def flash_saved_bytes(t, s, heads, b):
    return 2 * t * s * heads * b  # one write and one read of every score


@numeric(22, ("transformers.attention",), "", """
    Per query-key pair, an attention head's score dot product and its weighted sum of values each
    cost 2 FLOPs per element of the head dimension H = {h} (a multiply-add is 2 FLOPs). The
    softmax costs about {c} FLOPs per pair (exponent, running sum, scaling). What fraction of the
    attention FLOPs is the softmax?""",
    h=128, c=5)
def softmax_fraction(h, c):
    return c / (2 * 2 * h + c)


@numeric(23, ("transformers.attention", "roofline.time-bounds"), "s", """
    An RMSNorm over a bf16 activation of shape [{b}, {d}] ({eb} bytes per element) reads it once
    from HBM, writes the result once and does about {c} FLOPs per element. On a chip with {peak}
    FLOPs/s and {bw} bytes/s of HBM, with compute and memory traffic overlapping, how long does it
    take?""",
    b=4096, d=8192, eb=2, c=4, peak=1.97e14, bw=8.1e11)
def norm_time(b, d, eb, c, peak, bw):
    return max(c * b * d / peak, 2 * eb * b * d / bw)


# ---- causal masking ------------------------------------------------------------------------

@numeric(24, ("transformers.attention-context", "transformers.attention"), "FLOPs", """
    A causal attention layer sees sequences of T = {t} tokens with N = {n} heads of dimension
    H = {h}; a query attends to its own position and every earlier one. Counting only the score
    products and the weighted sums of values (a multiply-add is 2 FLOPs) for allowed query-key
    pairs, how many forward FLOPs does one sequence cost?""",
    t=4096, n=32, h=128)
def causal_attention_flops(t, n, h):
    pairs = t * (t + 1) / 2
    return 2 * 2 * h * n * pairs


@numeric(25, ("transformers.attention-context",), "", """
    A causal attention kernel computes the [T, T] score matrix in square tiles of {tile} x {tile}
    with T = {t}. Tiles wholly above the diagonal are skipped and tiles on the diagonal are computed
    in full. What fraction of all tiles does it compute?""",
    t=8192, tile=512)
def causal_tile_fraction(t, tile):
    n = t // tile
    return (n * (n + 1) / 2) / (n * n)


@numeric(26, ("transformers.attention-context", "transformers.dot-flops"), "tokens", """
    A layer has 12 D^2 weight parameters with D = {d} (attention projections with N H = D, and the
    MLP), each costing 2 forward FLOPs per token. Its causal attention lets the query at position i
    attend to i keys, at 2 FLOPs per element of the N H = D dimensions for the scores and again for
    the weighted sum. At what sequence length T does the layer's attention cost per token, averaged
    over the sequence, equal its weight FLOPs per token?""",
    d=4096)
def causal_attention_crossover(d):
    # 4 D (T + 1) / 2 = 24 D^2
    return 12 * d - 1
