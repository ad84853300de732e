"""GPUs: chip anatomy, NVLink nodes and the scale-out network, collectives, LLM rooflines."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, ("gpus.chip", "gpus.specs"), "FLOPs", """
    A GPU with {sms} streaming multiprocessors reaches {peak} dense bf16 FLOPs/s at a boost clock
    of {clock} Hz. How many bf16 FLOPs does one SM perform per clock cycle?""",
    sms=132, peak=9.9e14, clock=1.98e9)
def flops_per_sm_cycle(sms, peak, clock):
    return peak / (sms * clock)


@numeric(2, "gpus.specs", ("s", "FLOPs/B"), """
    A GPU has {hbm} bytes of HBM with {bw} bytes/s of bandwidth and {peak} bf16 FLOPs/s. How long
    does reading the whole HBM once take, and what arithmetic intensity does a kernel need to be
    compute-bound? (time first)""",
    hbm=1.41e11, bw=4.8e12, peak=9.9e14)
def gpu_memory_sweep(hbm, bw, peak):
    return fm.comms_time(hbm, bw), fm.intensity(peak, bw)


@numeric(3, ("gpus.networking", "gpus.collectives"), "s", """
    Inside a node of {n} GPUs connected through NVSwitches, each GPU has {w} bytes/s of egress
    bandwidth. An AllGather over the node assembles an array of {nbytes} bytes; each GPU must
    receive the (N - 1) / N of the array it lacks. How long does it take?""",
    n=8, w=4.5e11, nbytes=1e9)
def node_allgather(n, w, nbytes):
    return nbytes * (n - 1) / (n * w)


@numeric(4, ("gpus.collectives", "gpus.fat-tree"), "s", """
    Across nodes, an AllReduce runs without in-network reduction, limited by each node's egress
    bandwidth of {w} bytes/s; ignore latency and the (N - 1)/N factor. How long does an AllReduce
    of {nbytes} bytes take?""",
    w=4e11, nbytes=1.4e10)
def cross_node_allreduce(w, nbytes):
    return 2 * nbytes / w


@numeric(5, "gpus.collectives", "s", """
    An AllToAll inside a node of {n} GPUs moves an array of {nbytes} bytes; each GPU sends (N - 1)
    / N of its 1 / N share to the others over {w} bytes/s of egress. How long does it take?""",
    n=8, nbytes=4e9, w=9e11)
def node_alltoall(n, nbytes, w):
    return nbytes * (n - 1) / (n * n * w)


@numeric(6, "gpus.rooflines", "tokens", """
    A mixture-of-experts model activates {k} of its {e} experts per token and trains with data
    parallelism across nodes on GPUs of {peak} FLOPs/s with {w} bytes/s of node-level collective
    bandwidth. What per-GPU token batch is needed for the gradient reduction to be hidden?""",
    k=2, e=48, peak=9.9e14, w=4e11)
def moe_dp_batch(k, e, peak, w):
    return e / k * peak / w


@numeric(7, "gpus.rooflines", "GPUs", """
    Tensor parallelism over Y GPUs of one node shards an MLP with d_ff = {f}. Each GPU has {w}
    bytes/s of NVLink egress and {peak} FLOPs/s. Up to what Y does the tensor-parallel matmul stay
    compute-bound?""",
    f=53248, w=9e11, peak=2.3e15)
def gpu_tp_limit(f, w, peak):
    return f * w / peak


@numeric(8, "gpus.rooflines", "s", """
    A pipeline with {stages} stages and {micro} microbatches sends bf16 activations of a batch of
    {batch} tokens and width {d} ({b} bytes per element) between stages over {w} bytes/s: the batch
    is split evenly into the microbatches, each link carries one microbatch at a time, compute
    takes no time, and a microbatch moves on to the next stage as soon as it has arrived. How long
    after the first send does the last microbatch reach the last stage?""",
    stages=16, micro=32, batch=1048576, d=8192, b=2, w=4e11)
def pipeline_comms(stages, micro, batch, d, b, w):
    return b * batch * d / (w * micro) * (micro + stages - 2)


# ---- expert parallelism: the AllToAll roofline ------------------------------------------------

@numeric(21, ("gpus.collectives", "sharding.alltoall"), "s", """
    Inside an 8-GPU node where every GPU has {w} bytes/s of one-way NVLink egress and a direct
    path to every other GPU, an AllToAll redistributes an array of {nbytes} bytes in total: each GPU
    starts with an eighth of it and keeps the eighth of its own shard that stays local. How long
    does the AllToAll take?""",
    w=4.5e11, nbytes=1e9)
def node_alltoall_switched(w, nbytes):
    n = 8
    return nbytes * (n - 1) / (w * n * n)


@numeric(22, ("gpus.collectives", "gpus.rooflines", "sharding.alltoall"), "s", """
    An MoE layer on an 8-GPU node (one expert group per GPU, {w} bytes/s of one-way NVLink egress
    each) dispatches tokens with an AllToAll of {nbytes} bytes in total, where every token goes to
    {k} of the 8 GPUs, so only those entries of the exchange are non-zero. Leaving out the
    (N - 1)/N factor, how long does the dispatch take?""",
    w=4.5e11, nbytes=1e9, k=2)
def sparse_alltoall(w, nbytes, k):
    n = 8
    return min(k / n, 1) * nbytes / (w * n)


@numeric(23, ("gpus.rooflines", "transformers.moe-remat"), "", """
    In an expert-parallel MoE layer each token's bf16 activation vector of width D is sent to {k}
    experts on other GPUs and the results are sent back (two AllToAlls, {eb} bytes per element
    each way), and each expert applies a gated MLP of hidden width F (three D x F matrices, a
    multiply-add is 2 FLOPs) to every token it receives. A GPU does {peak} FLOPs/s and has {w}
    bytes/s of one-way egress. Above what F does the expert compute take longer than the two
    AllToAlls?""",
    k=8, eb=2, peak=9.9e14, w=4.5e11)
def expert_parallel_min_width(k, eb, peak, w):
    # per token and GPU: k * 2 * 3 D F / peak  >  2 * k * eb D / w
    return 2 * eb * peak / (2 * 3 * w)


# ---- GB200 NVL72 ----------------------------------------------------------------------------

# The prompt states a GPU's shard and no (N - 1)/N factor: with the whole array stated, array /
# egress (two of the prompt's numbers) was within 2% of the key (tests/tasks/synthetic/test_attack_v2.py).
@numeric(24, ("gpus.networking", "gpus.collectives"), "s", """
    A GB200 NVL72 NVLink domain joins 72 GPUs, each with 9e11 bytes/s of one-way NVLink egress.
    Each GPU holds its own {shard}-byte shard of an array. How long does an AllGather that leaves
    the whole array on every GPU take?""",
    shard=1.5e8)
def nvl72_allgather(shard):
    n = 72
    return shard * (n - 1) / 9e11


@numeric(25, ("gpus.fat-tree", "gpus.collectives"), "s", """
    Each of the {gpus} GPUs of a GB200 NVL72 domain has one {nic} bits/s NIC to the scale-out
    network. An AllReduce of {nbytes} bytes runs across several such domains without in-network
    reduction and is limited by the domain's scale-out egress; ignore latency and the (N - 1)/N
    factor. How long does it take?""",
    gpus=72, nic=4e11, nbytes=2.7e10)
def nvl72_cross_domain_allreduce(gpus, nic, nbytes):
    # the domain's egress is the book's answer to a question of its own: stated as the NICs it comes from
    egress = gpus * nic / 8
    return 2 * nbytes / egress


@numeric(26, ("gpus.rooflines", "gpus.networking"), "GPUs", """
    Tensor parallelism inside a GB200 NVL72 domain shards an MLP with d_ff = {f}. Each GPU does
    {peak} bf16 FLOPs/s and has {w} bytes/s of one-way NVLink egress. Up to what tensor-parallel
    degree does the matmul stay compute-bound?""",
    f=28672, peak=2.25e15, w=9e11)
def nvl72_tp_limit(f, peak, w):
    return f * w / peak
