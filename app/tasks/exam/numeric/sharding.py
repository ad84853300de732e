"""Sharded matrices and collectives: per-device sizes, the four matmul cases, collective costs."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "sharding.notation", "B", """
    An array A[I, J] with I = {i} and J = {j} holds {b}-byte elements and is sharded as
    A[I_XY, J] on a mesh with axis sizes X = {x} and Y = {y}. How many bytes of A does each
    device hold?""",
    i=65536, j=8192, b=2, x=8, y=4)
def bytes_per_device(i, j, b, x, y):
    return i * j * b / (x * y)


@numeric(2, "sharding.allgather-reducescatter", "s", """
    A bf16 array of shape [{e}, {f}] ({b} bytes per element) is sharded along its first dimension
    over one mesh axis that forms a full ring with wraparound. Each link carries {w} bytes/s in
    both directions combined. Assuming the AllGather is bandwidth-bound, how long does it take to
    gather the full array onto every device?""",
    e=4096, f=8192, b=2, w=9e10)
def allgather_seconds(e, f, b, w):
    return fm.allgather_time(e * f * b, w)


@numeric(3, "sharding.allgather-reducescatter", "s", """
    A tiny array of {nbytes} bytes is AllGathered over a ring of {axis} chips whose links carry
    {w} bytes/s bidirectionally. Every hop costs at least {hop} s whatever its size, and a
    bidirectional ring needs half as many hops as it has chips. How long does the AllGather take?""",
    nbytes=65536, axis=16, w=9e10, hop=1e-6)
def latency_bound_allgather(nbytes, axis, w, hop):
    return fm.allgather_time_latency(nbytes, w, axis, hop)


@numeric(4, "sharding.allgather-reducescatter", "s", """
    An array of shape [{rows}, {cols}] with {b}-byte elements is sharded over {axes} mesh axes at
    once and AllGathered over all of them, each axis being a full ring whose links carry {w}
    bytes/s bidirectionally. Ignoring per-hop latency and the (N - 1)/N ring factor, how long does
    the AllGather take?""",
    rows=8192, cols=16384, b=2, w=1.8e11, axes=2)
def multi_axis_allgather(rows, cols, b, w, axes):
    return fm.allgather_time(rows * cols * b, w, axes)


@numeric(5, "sharding.allreduce-alltoall", "s", """
    Gradients of a [{d}, {f}] weight are kept in fp32 ({b} bytes per element) and AllReduced over
    a full ring whose links carry {w} bytes/s bidirectionally. How long does the bandwidth-bound
    AllReduce take?""",
    d=8192, f=28672, b=4, w=1.8e11)
def allreduce_seconds(d, f, b, w):
    return fm.allreduce_time(d * f * b, w)


@numeric(6, "sharding.alltoall", "s", """
    An activation of shape [{t}, {d}] with {b}-byte elements is resharded with an AllToAll from
    being sharded on D to being sharded on T, over a bidirectional ring whose links carry {w}
    bytes/s. How long does the AllToAll take?""",
    t=32768, d=8192, b=2, w=9e10)
def alltoall_seconds(t, d, b, w):
    return fm.alltoall_time(t * d * b, w)


@numeric(7, ("sharding.matmul-cases", "sharding.allreduce-alltoall"), ("s", "s"), """
    We compute A[I, J_X] . B[J_X, K] -> C[I, K] with I = {i}, J = {j}, K = {k} in bf16 ({b} bytes
    per element) on a mesh axis X of {x} chips, each doing {peak} FLOPs/s, whose ring links carry
    {w} bytes/s bidirectionally. Each chip multiplies its local shards and the partial sums are
    then AllReduced; ignore per-hop latency and leave out the (N - 1)/N ring factor. Give the
    per-chip compute time, then the AllReduce time.""",
    i=4096, j=16384, k=8192, b=2, x=8, peak=4.59e14, w=1.8e11)
def sharded_contraction(i, j, k, b, x, peak, w):
    return fm.compute_time(fm.matmul_flops(i, j, k) / x, peak), fm.allreduce_time(i * k * b, w)


@numeric(8, "sharding.matmul-cases", "FLOPs", """
    We compute A[I_X, J] . B[J, K_Y] -> C[I_X, K_Y] with I = {i}, J = {j}, K = {k} on a mesh with
    X = {x} and Y = {y}. No communication is needed. How many FLOPs does each device perform?""",
    i=16384, j=8192, k=32768, x=16, y=4)
def case_one_flops(i, j, k, x, y):
    return fm.matmul_flops(i, j, k) / (x * y)


@numeric(9, ("sharding.allgather-contracting", "sharding.allgather-reducescatter"), "s", """
    We compute A[I, J_X] . B[J, K] -> C[I, K] where only A is sharded on the contracting dimension:
    A is first AllGathered over the axis X and then multiplied locally. A has I = {i} rows and
    J = {j} columns with {b}-byte elements, and the ring links carry {w} bytes/s bidirectionally.
    How long does the AllGather of A take?""",
    i=1536, j=8192, b=2, w=9e10)
def case_two_gather(i, j, b, w):
    return fm.allgather_time(i * j * b, w)
