"""Facts about a candidate's jax.Array, established by code the candidate never ran in.

The candidate's process only *claims* things: the harness there reads the returned array's
values and the mesh and partition spec it declares (child/values._sharding_claim) as plain data,
and a candidate can fake any of that (subclass, patched class, rebound encoder, forged frame).
So nothing it says about shards, devices or replication is used. Instead the parent sends the
claims of the cases whose values passed to a *fresh* sandbox child that runs only
``describe_placements`` below (the service's own code, never the candidate's): it builds the
declared mesh from its own 8 CPU devices, places the values with ``NamedSharding`` and reports
the real spec, mesh, device count, shard shapes and replication of what it placed. Those facts
are compared with what the case requires.

What the check grades is therefore the declaration and the values: a candidate that declares
the right mesh and spec for the right values passes, by whatever route it returned them, and
no route earns more than that declaration is worth."""

from __future__ import annotations

import inspect
from functools import cache
from typing import TYPE_CHECKING, Any

from app.graders.impl_decode import JaxClaim, decode

if TYPE_CHECKING:
    from app.sandbox.pool import Sandbox


def describe_placements(claims):  # pragma: no cover - runs in a sandbox child
    # type: (list[dict[str, Any]]) -> list[dict[str, Any] | None]
    """Trusted: place every claimed array as declared and describe the result (None when the
    declaration cannot be placed). Self-contained: its source is sent to the child as is, so its
    types are comments (an annotation would be evaluated there, where ``Any`` is not defined)."""
    import math

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    dtypes = {"float": np.float32, "int": np.int32, "bool": np.bool_}

    def describe(claim):  # type: (dict[str, Any]) -> dict[str, Any] | None
        names = [name for name, _ in claim["mesh"]]
        sizes = [size for _, size in claim["mesh"]]
        if len(set(names)) != len(names) or math.prod(sizes) > len(devices) or claim["spec"] is None:
            return None
        shape = claim["shape"]
        spec = [tuple(e) if isinstance(e, list) else e for e in claim["spec"]]
        spec += [None] * (len(shape) - len(spec))
        used = [n for e in spec if e is not None for n in (e if isinstance(e, tuple) else (e,))]
        if any(n not in names for n in used) or len(set(used)) != len(used):
            return None
        mesh = Mesh(np.array(devices[:math.prod(sizes)]).reshape(sizes), tuple(names))
        values = np.asarray(claim["data"], dtype=dtypes[claim["kind"]]).reshape(shape)
        # jax leaves PartitionSpec.__new__ unannotated, so the strict check sees an untyped call.
        partition = PartitionSpec(*spec)  # type: ignore[no-untyped-call]
        placed = jax.device_put(values, NamedSharding(mesh, partition))
        if not np.array_equal(np.asarray(placed), values):
            return None
        normal = [e[0] if isinstance(e, tuple) and len(e) == 1 else list(e) if isinstance(e, tuple) else e
                  for e in spec]
        return {
            "spec": normal,
            "mesh": dict(zip(names, sizes, strict=True)),
            "num_devices": len(placed.sharding.device_set),
            "shard_shapes": sorted({tuple(int(n) for n in s.data.shape) for s in placed.addressable_shards}),
            "fully_replicated": bool(placed.sharding.is_fully_replicated),
        }

    out = []
    for claim in claims:
        try:
            out.append(None if claim["mesh"] is None else describe(claim))
        except Exception:  # an unplaceable declaration (indivisible shape, say)
            out.append(None)
    return out


@cache
def _trusted_source() -> str:
    return inspect.getsource(describe_placements)


class TrustedCheckFailed(Exception):
    """The trusted child did not answer: the grade must fail closed, unscored."""


def established_shardings(box: Sandbox, claims: list[JaxClaim], max_items: int) -> list[dict[str, Any] | None]:
    """What each claimed array really is once placed by trusted code (None: not placeable)."""
    if not claims:
        return []
    run = box.run(_trusted_source(), "describe_placements", [[c.placement() for c in claims]], profile="jax")
    result = (run.final or {}).get("result") if run.status == "finished" else None
    facts = decode(result.get("value"), max_items) if isinstance(result, dict) and result.get("kind") == "value" \
        else None
    if not isinstance(facts, list) or len(facts) != len(claims):
        raise TrustedCheckFailed("the trusted sharding check did not complete")
    return [f if isinstance(f, dict) else None for f in facts]


def meets(required: dict[str, Any], facts: dict[str, Any] | None) -> bool:
    if facts is None:
        return False
    return all(_plain(facts.get(key)) == _plain(want) for key, want in required.items())


def _plain(value: Any) -> Any:
    """Tuples and lists compare alike (shard shapes come back as lists)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
