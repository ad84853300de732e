"""Plain data across the sandbox boundary (part of the harness program; see child/harness.py).

Three users, one vocabulary of tagged JSON:

* the runner, in the candidate's process, encodes what the candidate returned (``_encode``).
  It holds no secret and decides nothing: the candidate can rebind it or write a frame of its
  own, so whatever it produces is a *claim*, worth exactly what the same plain data is worth;
* the reporter, a process that never runs candidate code, checks every result frame with
  ``plain_problem`` before passing it on, so a malformed or oversized value never leaves the
  sandbox;
* the parent (app/graders/impl_decode.py) imports this module and runs the same check again
  before it decodes anything, because it trusts nothing that came out of a sandbox.

The check is iterative and stops at the first violated cap (items, depth, string length,
integer size), so its cost is linear in the data and bounded by the caps whatever arrives.

The wire forms: JSON scalars (no NaN/infinity tokens), lists, ``{"$dict": [[k, v], ...]}``,
``{"$array": {"kind", "shape", "data"}}`` for a numpy array, ``{"$jax": {"kind", "shape",
"data", "mesh", "spec"}}`` for a jax.Array (its mesh and partition spec as plain data, to be
checked by trusted code) and ``{"$unsupported": null}`` for anything else. Nothing of the
candidate's own making (type names, dtype text, reprs) is ever put on the wire. Stdlib only."""

import sys

# For the type checker only (mypy reads this name as true): the child imports nothing it does not use.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Captured before candidate code runs: rebinding the builtins afterwards cannot change them here.
_int, _float, _str, _bool, _list, _tuple, _dict = int, float, str, bool, list, tuple, dict
_type, _len, _isinstance = type, len, isinstance

MAX_DEPTH = 24
MAX_STRING = 4096  # characters in one string
MAX_INT_BITS = 63  # larger integers are not plain data (and need not be: no answer is that big)
MAX_MESH_AXES = 4
ARRAY_KINDS = ("bool", "int", "float")
_KIND_OF = {"b": "bool", "i": "int", "u": "int", "f": "float"}
# Filled by the runner after warm-up, before any candidate code: the one concrete jax.Array type
# and the one sharding type whose mesh and spec are read.
_JAX_TYPES: list[type] = []


class ResultTooLarge(Exception):
    pass


def _encode(value, budget):
    """JSON-safe form of a returned value. Only exact built-in and numpy/JAX types are
    encoded; subclasses, duck types and proxies become ``$unsupported``."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ResultTooLarge()
    t = _type(value)
    if value is None or t is _bool:
        return value
    if t is _str:
        budget[0] -= _len(value) // 8
        if budget[0] < 0:
            raise ResultTooLarge()
        return value if _len(value) <= MAX_STRING else {"$unsupported": None}
    if t is _int:
        return value if value.bit_length() <= MAX_INT_BITS else {"$unsupported": None}
    if t is _float:
        return value if value - value == 0.0 else {"$unsupported": None}  # NaN and infinities fail
    if t is _list or t is _tuple:
        return [_encode(v, budget) for v in value]
    if t is _dict:
        return {"$dict": [[_encode(k, budget), _encode(v, budget)] for k, v in value.items()]}
    np = sys.modules.get("numpy")
    if np is not None:
        if t in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
                 np.uint64, np.uint32, np.uint16, np.uint8, np.bool_):
            return _encode(value.item(), budget)
        if t is np.ndarray:
            return _encode_array(np, value, "$array", None, budget)
    if _JAX_TYPES and t is _JAX_TYPES[0] and np is not None:
        return _encode_array(np, np.asarray(value), "$jax", _sharding_claim(value), budget)
    return {"$unsupported": None}


def _encode_array(np, arr, tag, claim, budget):
    budget[0] -= int(arr.size)
    if budget[0] < 0:
        raise ResultTooLarge()
    kind = _KIND_OF.get(arr.dtype.kind)
    if kind is None or arr.ndim > MAX_DEPTH - 4:
        return {"$unsupported": None}
    if kind == "float" and not bool(np.isfinite(arr).all()):
        return {"$unsupported": None}
    body = {"kind": kind, "shape": [int(n) for n in arr.shape], "data": arr.tolist()}
    if tag == "$jax":
        body["mesh"], body["spec"] = claim
    return {tag: body}


def _sharding_claim(arr):
    """The mesh (axis names and sizes) and partition spec the array declares. A claim only: the
    parent has trusted code establish what they mean."""
    sh = arr.sharding
    if _type(sh) is not _JAX_TYPES[1]:
        return None, None
    mesh = [[_str(name), _int(size)] for name, size in sh.mesh.shape.items()]
    spec = []
    for entry in sh.spec:
        if entry is None or _type(entry) is _str:
            spec.append(entry)
        elif _type(entry) is _tuple and all(_type(e) is _str for e in entry):
            spec.append(list(entry))
        else:
            return mesh, None
    return mesh, spec


def plain_problem(value: "Any", max_items: int) -> str | None:
    """None when value is well-formed wire data within the caps; else a short fixed reason.
    Iterative, so neither depth nor width can exhaust a stack; a list's scalars are checked in
    place (the common case) rather than pushed."""
    stack = [(value, 0, False)]
    items = 0
    while stack:
        v, depth, pair = stack.pop()
        if depth > MAX_DEPTH:
            return "too deep"
        t = _type(v)
        if t is _list:
            if pair and _len(v) != 2:
                return "malformed dict"
            items += _len(v)
            if items > max_items:
                return "too many items"
            for x in v:
                tx = _type(x)
                if tx is _float:
                    if x != x or x - x != 0.0:  # NaN, or an infinity (inf - inf is NaN)
                        return "not a finite number"
                elif tx is _int:
                    if x.bit_length() > MAX_INT_BITS:
                        return "integer too large"
                elif x is not None and tx is not _bool:
                    stack.append((x, depth + 1, False))
            continue
        items += 1 + (_len(v) // 8 if t is _str else 0)  # long strings cost like the encoder counts them
        if items > max_items:
            return "too many items"
        problem = _scalar_problem(v, t)
        if problem is None:
            continue
        if problem != "container":
            return problem
        if t is not _dict or _len(v) != 1:
            return "malformed value"
        (tag, body), = v.items()
        if tag == "$unsupported":
            if body is not None:
                return "malformed value"
        elif tag == "$dict":
            if _type(body) is not _list:
                return "malformed dict"
            for p in body:
                if _type(p) is not _list or _len(p) != 2 or _scalar_problem(p[0], _type(p[0])) is not None:
                    return "malformed dict"
            stack.extend((p, depth + 1, True) for p in body)
        elif tag in ("$array", "$jax"):
            problem = _array_problem(tag, body)
            if problem:
                return problem
            stack.append((body["data"], depth + 1, False))
        else:
            return "malformed value"
    return None


def _scalar_problem(v, t):
    """None for a valid scalar, a reason for an invalid one, "container" for anything else."""
    if v is None or t is _bool:
        return None
    if t is _int:
        return "integer too large" if v.bit_length() > MAX_INT_BITS else None
    if t is _float:
        return "not a finite number" if v != v or v - v != 0.0 else None
    if t is _str:
        return "string too long" if _len(v) > MAX_STRING else None
    return "container"


def _array_problem(tag, body):
    keys = {"kind", "shape", "data"} | ({"mesh", "spec"} if tag == "$jax" else set())
    if _type(body) is not _dict or set(body) != keys:
        return "malformed array"
    shape = body["shape"]
    if (body["kind"] not in ARRAY_KINDS or _type(shape) is not _list or _len(shape) > MAX_DEPTH - 4
            or not all(_type(n) is _int and n >= 0 for n in shape)):
        return "malformed array"
    if not _data_matches_shape(body["data"], shape):
        return "malformed array"
    if tag == "$jax":
        mesh, spec = body["mesh"], body["spec"]
        if mesh is not None:
            if _type(mesh) is not _list or not 0 < _len(mesh) <= MAX_MESH_AXES:
                return "malformed mesh"
            for axis in mesh:
                if (_type(axis) is not _list or _len(axis) != 2 or _type(axis[0]) is not _str
                        or not 0 < _len(axis[0]) <= 64 or _type(axis[1]) is not _int or not 0 < axis[1] <= 4096):
                    return "malformed mesh"
        if spec is not None:
            if mesh is None or _type(spec) is not _list or _len(spec) > _len(shape):
                return "malformed spec"
            for entry in spec:
                names = entry if _type(entry) is _list else [entry]
                if entry is not None and not all(_type(n) is _str and 0 < _len(n) <= 64 for n in names):
                    return "malformed spec"
    return None


def _data_matches_shape(data, shape):
    """The nested lists have exactly the declared shape (walked level by level, no recursion)."""
    level = [data]
    for n in shape:
        nxt = []
        for node in level:
            if _type(node) is not _list or _len(node) != n:
                return False
            nxt.extend(node)
        level = nxt
    return all(_type(x) in (_int, _float, _bool) for x in level)


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
