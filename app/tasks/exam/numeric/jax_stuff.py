"""Programming TPUs in JAX: shardings on a mesh and the cost of the collectives they imply."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, ("jax.mesh-specs", "jax.auto-sharding"), "B", """
    On a mesh with axes ('data', 'model') of sizes {x} and {y}, an fp32 array ({b} bytes per
    element) of shape ({rows}, {cols}) is placed with NamedSharding(mesh, P('data', 'model')). How
    many bytes does each device store?""",
    x=16, y=4, b=4, rows=32768, cols=8192)
def named_sharding_bytes(x, y, b, rows, cols):
    return rows * cols * b / (x * y)


@numeric(2, ("jax.collectives", "jax.explicit-sharding"), "s", """
    Inside shard_map, every device holds a partial fp32 sum of shape ({rows}, {cols}) ({b} bytes per
    element) and calls psum over an axis forming a full ring whose links carry {w} bytes/s
    bidirectionally. How long does the bandwidth-bound psum take?""",
    rows=4096, cols=8192, b=4, w=9e10)
def psum_time(rows, cols, b, w):
    return fm.allreduce_time(rows * cols * b, w)


@numeric(3, ("jax.collectives", "jax.explicit-sharding"), "s", """
    A shard_map collective matmul over {x} devices runs {x} steps. At each step a device passes a
    {chunk}-byte shard to its neighbour with ppermute over a link of {w} bytes/s (one way) while
    multiplying a bf16 [{b}, {d}] block by a [{d}, {f}] block at {peak} FLOPs/s. With perfect
    overlap, how long does the whole loop take?""",
    x=8, chunk=8388608, w=4.5e10, b=512, d=8192, f=4096, peak=1.97e14)
def collective_matmul_time(x, chunk, w, b, d, f, peak):
    return x * max(fm.comms_time(chunk, w), fm.compute_time(fm.matmul_flops(b, d, f), peak))


@numeric(4, "jax.auto-sharding", "B", """
    Under jit, In sharded as P('X', None) with shape ({b}, {d}) is multiplied by W sharded as
    P(None, 'Y') with shape ({d}, {f}), the mesh having X = {x} and Y = {y}. The output is left
    sharded as P('X', 'Y') in bf16 ({e} bytes per element). How many output bytes live on each
    device?""",
    b=16384, d=8192, f=16384, x=8, y=8, e=2)
def jit_output_bytes(b, d, f, x, y, e):
    return b * f * e / (x * y)


@numeric(5, ("jax.collectives", "jax.explicit-sharding"), "s", """
    Inside shard_map, jax.lax.all_to_all moves a bf16 array of total shape ({n}, {d}) ({b} bytes
    per element) from being split on one dimension to the other over a bidirectional ring whose
    links carry {w} bytes/s. How long does it take?""",
    n=65536, d=4096, b=2, w=9e10)
def all_to_all_time(n, d, b, w):
    return fm.alltoall_time(n * d * b, w)


@numeric(6, ("jax.collectives", "jax.explicit-sharding"), "B", """
    Inside shard_map each device holds a local block of shape ({m}, {d}) in bf16 ({b} bytes per
    element) and calls jax.lax.all_gather over an axis of {x} devices with tiled=True. How many
    bytes does each device hold afterwards?""",
    m=1024, d=8192, b=2, x=16)
def all_gather_bytes(m, d, b, x):
    return x * m * d * b


@numeric(7, "jax.mesh-specs", "tokens", """
    A batch of {seqs} sequences of {seqlen} tokens is placed with P('data', None) on a 2D mesh whose
    'data' axis has {x} devices; the mesh also has a 'model' axis. How many tokens does each device
    hold?""",
    seqs=256, seqlen=4096, x=32)
def tokens_per_device(seqs, seqlen, x):
    # Devices along 'model' hold replicas of the same batch shard: only 'data' divides it.
    return seqs * seqlen / x
