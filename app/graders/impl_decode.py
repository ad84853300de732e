"""The parent's reading of a sandbox result: strict, by type, with the same caps the reporter
applied (child/values.plain_problem), checked again here because nothing that comes out of a
sandbox is trusted. Anything malformed decodes to ``Unsupported``; nothing raises.

Cost is linear in the result and bounded by the caps (items, depth, string length, integer
size) before any value is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.sandbox.child.values import plain_problem

DEFAULT_MAX_ITEMS = 10_000


class Unsupported:
    """A value outside the plain-data vocabulary (or a malformed one). Carries nothing of it."""

    def __repr__(self) -> str:
        return "Unsupported()"


@dataclass(frozen=True)
class Returned:
    """A numpy array the candidate returned: its shape and nested-list data."""

    shape: tuple[int, ...]
    data: Any


@dataclass(frozen=True)
class JaxClaim:
    """A jax.Array as the candidate's process described it: data, and the mesh (axis name and
    size pairs) and partition spec it declares. A claim only; app/graders/impl_jax.py has trusted
    code establish what sharding that declaration denotes."""

    shape: tuple[int, ...]
    data: Any
    kind: str
    mesh: tuple[tuple[str, int], ...] | None
    spec: tuple[str | tuple[str, ...] | None, ...] | None

    def placement(self) -> dict[str, Any]:
        """The plain data a trusted child needs to place this array."""
        return {"shape": list(self.shape), "data": self.data, "kind": self.kind,
                "mesh": [list(a) for a in self.mesh] if self.mesh else None,
                "spec": [list(e) if isinstance(e, tuple) else e for e in self.spec] if self.spec is not None
                else None}


def decode(value: Any, max_items: int = DEFAULT_MAX_ITEMS) -> Any:
    """Wire data back into plain Python values; Unsupported when it breaks any rule."""
    if plain_problem(value, max_items) is not None:
        return Unsupported()
    return _build(value)


def _build(value: Any) -> Any:
    # Depth is capped by plain_problem (MAX_DEPTH), so this recursion is bounded.
    if isinstance(value, list):
        return [_build(v) for v in value]
    if not isinstance(value, dict):
        return value
    (tag, body), = value.items()
    if tag == "$dict":
        return {k: _build(v) for k, v in body}
    if tag == "$array":
        return Returned(tuple(body["shape"]), body["data"])
    if tag == "$jax":
        mesh = tuple((name, size) for name, size in body["mesh"]) if body["mesh"] is not None else None
        spec = (tuple(tuple(e) if isinstance(e, list) else e for e in body["spec"])
                if body["spec"] is not None else None)
        return JaxClaim(tuple(body["shape"]), body["data"], body["kind"], mesh, spec)
    return Unsupported()
