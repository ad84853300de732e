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
