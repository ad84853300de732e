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
    k=2, e=64, peak=9.9e14, w=4e11)
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
    {batch} tokens and width {d} ({b} bytes per element) between stages over {w} bytes/s. Each hop
    carries one microbatch's activations and there are (microbatches + stages - 2) hops. What is
    the total pipeline communication time?""",
    stages=16, micro=32, batch=1048576, d=8192, b=2, w=4e11)
def pipeline_comms(stages, micro, batch, d, b, w):
    return b * batch * d / (w * micro) * (micro + stages - 2)
