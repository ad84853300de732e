"""Value encoding for the sandbox child (part of the harness program; see child_harness.py).

Runs in the candidate's process, so it holds no secret and decides nothing: it turns whatever the
candidate returned into tagged JSON for the reporter, and case inputs into numpy arrays."""

import sys

# Captured before candidate code runs: rebinding the builtins afterwards cannot change them here.
_int, _float, _str, _bool, _list, _tuple, _dict = int, float, str, bool, list, tuple, dict
_type, _len, _isinstance = type, len, isinstance


class ResultTooLarge(Exception):
    pass


def _encode(value, budget):
    """JSON-safe form of a returned value. Only plain data crosses; dicts are tagged so a
    returned dict can never pass for an array description."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ResultTooLarge()
    t = _type(value)
    if value is None or t is _bool or t is _str:
        if t is _str:
            budget[0] -= _len(value) // 8
            if budget[0] < 0:
                raise ResultTooLarge()
        return value
    if t is _int:
        if value.bit_length() > 256:
            return {"$unsupported": "int too large"}
        return value
    if t is _float:
        return value
    if t is _list or t is _tuple:
        return [_encode(v, budget) for v in value]
    if t is _dict:
        return {"$dict": [[_encode(k, budget), _encode(v, budget)] for k, v in value.items()]}
    np = sys.modules.get("numpy")
    if np is not None:
        if _isinstance(value, np.generic) and _type(value).__module__ == "numpy":
            return _encode(value.item(), budget)
        if t is np.ndarray:
            return _encode_array(np, value, None, budget)
    jax = sys.modules.get("jax")
    if jax is not None and _isinstance(value, jax.Array) and np is not None:
        return _encode_array(np, np.asarray(value), _sharding_of(value), budget)
    return {"$unsupported": t.__name__[:100]}


def _encode_array(np, arr, sharding, budget):
    budget[0] -= int(arr.size)
    if budget[0] < 0:
        raise ResultTooLarge()
    if arr.dtype.kind not in "biuf":
        return {"$unsupported": f"array of {arr.dtype}"}
    out = {"dtype": str(arr.dtype), "shape": [int(n) for n in arr.shape], "data": arr.tolist()}
    if sharding is not None:
        out["sharding"] = sharding
    return {"$array": out}


def _sharding_of(arr):
    sh = arr.sharding
    desc = {
        "type": _type(sh).__name__,
        "num_devices": len(sh.device_set),
        "shard_shapes": sorted({tuple(int(n) for n in s.data.shape) for s in arr.addressable_shards}),
        "fully_replicated": bool(sh.is_fully_replicated),
    }
    spec = getattr(sh, "spec", None)
    if spec is not None:
        desc["spec"] = [p if p is None or _type(p) is _str else [str(q) for q in p] if _isinstance(p, tuple)
                        else str(p) for p in spec]
    mesh = getattr(sh, "mesh", None)
    if mesh is not None:
        desc["mesh"] = {str(k): int(n) for k, n in mesh.shape.items()}
    return desc


def _decode_arg(value):
    """Inputs arrive as JSON; ``{"$array": ...}`` becomes a numpy array when numpy is loaded."""
    if _isinstance(value, list):
        return [_decode_arg(v) for v in value]
    if _isinstance(value, dict):
        if set(value) == {"$array"} and "numpy" in sys.modules:
            spec = value["$array"]
            np = sys.modules["numpy"]
            return np.asarray(spec["data"], dtype=spec["dtype"]).reshape(spec["shape"])
        if set(value) == {"$tuple"}:
            return tuple(_decode_arg(v) for v in value["$tuple"])
        return {k: _decode_arg(v) for k, v in value.items()}
    return value
