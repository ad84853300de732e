"""Reference solutions, one per exercise, written as a candidate would submit them: each
function is self-contained (its imports inside), so its source can be sent to a sandbox as is.

Never served: prompts describe the function, they never carry this code. For the pure-Python
exercises these functions are also the oracles the case generators call in the parent; the
JAX exercises' expected values are computed without JAX in their generators."""



def roofline_time(flops, hbm_bytes, comm_bytes, peak_flops, hbm_bandwidth, comm_bandwidth, overlap):
    times = [flops / peak_flops, hbm_bytes / hbm_bandwidth, comm_bytes / comm_bandwidth]
    return max(times) if overlap else sum(times)


def matmul_cost(b, d, f, bytes_per_element):
    flops = 2 * b * d * f
    nbytes = bytes_per_element * (b * d + d * f + b * f)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):
    import math

    return math.ceil(peak_flops * bytes_per_weight / (2 * hbm_bandwidth) - 1e-9)


def ring_collective_time(kind, array_bytes, n, link_bandwidth, bidirectional):
    if kind not in ("all_gather", "reduce_scatter", "all_reduce"):
        raise ValueError(f"unknown collective {kind!r}")
    if n == 1:
        return 0.0
    bandwidth = link_bandwidth * (2 if bidirectional else 1)
    one_pass = array_bytes * (n - 1) / n / bandwidth
    return 2 * one_pass if kind == "all_reduce" else one_pass


def training_cost(n_params, n_tokens, n_chips, peak_flops, mfu):
    flops = 6 * n_params * n_tokens
    return {"flops": flops, "seconds": flops / (n_chips * peak_flops * mfu)}


def fsdp_tp_optimal_x(batch, ffw, n_chips, fsdp_axes, tp_axes):
    import math

    return math.sqrt(batch / ffw * fsdp_axes / tp_axes * n_chips)


def fsdp_tp_plan(batch, d_model, ffw, n_chips, ici_bandwidth, peak_flops, fsdp_axes, tp_axes):
    best = None
    for x in range(1, n_chips + 1):
        if n_chips % x:
            continue
        y = n_chips // x
        fsdp = 4 * d_model * ffw / (y * ici_bandwidth * fsdp_axes)
        tp = 4 * batch * d_model / (x * ici_bandwidth * tp_axes)
        comms = max(fsdp, tp)
        if best is None or comms <= best[2]:
            best = (x, y, comms)
    x, y, comms = best
    math_time = 4 * batch * d_model * ffw / (n_chips * peak_flops)
    return {"x": x, "y": y, "comms_seconds": comms, "math_seconds": math_time,
            "compute_bound": comms < math_time}


def kv_cache_bytes(batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element):
    return 2 * batch * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_element


def torus_neighbors(shape, coord, wraparound):
    if len(coord) != len(shape) or any(not 0 <= c < n for c, n in zip(coord, shape, strict=False)):
        raise ValueError("coordinate outside the slice")
    found = set()
    for axis, n in enumerate(shape):
        for step in (-1, 1):
            c = coord[axis] + step
            if wraparound and n > 2:
                c %= n
            if 0 <= c < n and c != coord[axis]:
                found.add((*tuple(coord[:axis]), c, *tuple(coord[axis + 1:])))
    return sorted(list(p) for p in found)


def torus_stats(shape, wraparound):
    import math

    rings = [wraparound and n > 2 for n in shape]
    max_hops = sum(n // 2 if ring else n - 1 for n, ring in zip(shape, rings, strict=True))
    axis = max(range(len(shape)), key=lambda i: shape[i])
    if shape[axis] == 1:
        return {"max_hops": 0, "bisection_links": 0}
    links = math.prod(shape) // shape[axis] * (2 if rings[axis] else 1)
    return {"max_hops": max_hops, "bisection_links": links}


def shard_rows(x):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    return jax.device_put(x, NamedSharding(mesh, P("data", None)))


def sharded_matmul(x, w):
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    f = jax.jit(
        lambda a, b: a @ b,
        in_shardings=(NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))),
        out_shardings=NamedSharding(mesh, P("data", "model")),
    )
    return f(x, w)


def shardmap_column_sums(x):
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    try:
        from jax import shard_map
    except ImportError:
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()[:8]), ("i",))
    f = shard_map(lambda block: jax.lax.psum(block.sum(axis=0), "i"), mesh=mesh,
                  in_specs=P("i", None), out_specs=P(None))
    return jax.jit(f)(x)
