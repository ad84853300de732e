"""One plausibly wrong solution per exercise: the mistakes people actually make (a factor of 2,
a missing (N-1)/N, no wraparound, the wrong collective or sharding)."""

WRONG = {
    "roofline_time": '''
def roofline_time(flops, hbm_bytes, comm_bytes, peak_flops, hbm_bandwidth, comm_bandwidth, overlap):
    return flops / peak_flops + hbm_bytes / hbm_bandwidth + comm_bytes / comm_bandwidth
''',
    "matmul_cost": '''
def matmul_cost(b, d, f, bytes_per_element):
    flops = b * d * f
    nbytes = bytes_per_element * (b * d + d * f + b * f)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}
''',
    "critical_batch_size": '''
import math
def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):
    return math.ceil(peak_flops / (2 * hbm_bandwidth))
''',
    "ring_collective_time": '''
def ring_collective_time(kind, array_bytes, n, link_bandwidth, bidirectional):
    if kind not in ("all_gather", "reduce_scatter", "all_reduce"):
        raise ValueError(kind)
    t = array_bytes / (link_bandwidth * (2 if bidirectional else 1))
    return 2 * t if kind == "all_reduce" else t
''',
    "torus_neighbors": '''
def torus_neighbors(shape, coord, wraparound):
    if len(coord) != len(shape) or any(not 0 <= c < n for c, n in zip(coord, shape)):
        raise ValueError("outside")
    out = []
    for axis, n in enumerate(shape):
        for step in (-1, 1):
            c = coord[axis] + step
            if 0 <= c < n:
                p = list(coord)
                p[axis] = c
                out.append(p)
    return sorted(out)
''',
    "torus_stats": '''
import math
def torus_stats(shape, wraparound):
    rings = [wraparound and n > 2 for n in shape]
    hops = sum(n // 2 if r else n - 1 for n, r in zip(shape, rings))
    longest = max(shape)
    if longest == 1:
        return {"max_hops": 0, "bisection_links": 0}
    return {"max_hops": hops, "bisection_links": math.prod(shape) // longest}
''',
    "training_cost": '''
def training_cost(n_params, n_tokens, n_chips, peak_flops, mfu):
    flops = 2 * n_params * n_tokens
    return {"flops": flops, "seconds": flops / (n_chips * peak_flops * mfu)}
''',
    "fsdp_tp_optimal_x": '''
def fsdp_tp_optimal_x(batch, ffw, n_chips, fsdp_axes, tp_axes):
    return (batch / ffw * n_chips) ** 0.5
''',
    "fsdp_tp_plan": '''
def fsdp_tp_plan(batch, d_model, ffw, n_chips, ici_bandwidth, peak_flops, fsdp_axes, tp_axes):
    best = None
    for x in range(1, n_chips + 1):
        if n_chips % x:
            continue
        y = n_chips // x
        comms = max(2 * d_model * ffw / (y * ici_bandwidth * fsdp_axes),
                    2 * batch * d_model / (x * ici_bandwidth * tp_axes))
        if best is None or comms <= best[2]:
            best = (x, y, comms)
    x, y, comms = best
    math_time = 4 * batch * d_model * ffw / (n_chips * peak_flops)
    return {"x": x, "y": y, "comms_seconds": comms, "math_seconds": math_time,
            "compute_bound": comms < math_time}
''',
    "kv_cache_bytes": '''
def kv_cache_bytes(batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element):
    return batch * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_element
''',
    "jax_shard_rows": '''
import jax
def shard_rows(x):
    return jax.device_put(x)
''',
    "jax_sharded_matmul": '''
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
def sharded_matmul(x, w):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    f = jax.jit(lambda a, b: a @ b,
                in_shardings=(NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))),
                out_shardings=NamedSharding(mesh, P("data", None)))
    return f(x, w)
''',
    "jax_shard_map_psum": '''
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from jax import shard_map
def shardmap_column_sums(x):
    mesh = Mesh(np.array(jax.devices()[:8]), ("i",))
    f = shard_map(lambda b: jax.lax.pmean(b.sum(axis=0), "i"), mesh=mesh,
                  in_specs=P("i", None), out_specs=P(None))
    return jax.jit(f)(x)
''',
}
