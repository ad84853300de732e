"""Tables for the pure parts of impl grading: value comparison, code extraction, the AST
deny-list."""

from __future__ import annotations

import math

import pytest

from app.graders.impl_decode import JaxClaim, Unsupported
from app.graders.impl_jax import meets
from app.graders.impl_source import denied_imports, extract_code
from app.graders.impl_verdict import compare, decode

# (expected, returned as the harness encodes it, matches)
NUMBERS = [
    (2.0, 2.0 * (1 + 1e-7), True),
    (2.0, 2.0 * (1 + 1e-5), False),
    (3, 3.0, True),
    (0.0, 0.0, True),
    (1.0, math.nan, False),
    (1.0, math.inf, False),
    (1.0, True, False),  # a bool is not a number here
    (True, 1, False),
    (False, False, True),
    (1.0, "1.0", False),
]
STRUCTURES = [
    ({"a": 1.0}, {"$dict": [["a", 1.0]]}, True),
    ({"a": 1.0}, {"$dict": [["a", 1.0], ["b", 2]]}, False),
    ({"a": 1.0}, {"a": 1.0}, False),  # an untagged dict is not what the harness sends for a dict
    ([1, 2], [1, 2], True),
    ([1, 2], [2, 1], False),
    ([[1.0, 2.0]], {"$array": {"kind": "float", "shape": [1, 2], "data": [[1.0, 2.0]]}}, True),
    ([[1.0, 2.0]], {"$array": {"kind": "float", "shape": [1, 2], "data": [[1.0, 2.5]]}}, False),
    # data that does not have the declared shape, an unknown kind, extra keys
    ([[1.0, 2.0]], {"$array": {"kind": "float", "shape": [2, 1], "data": [[1.0, 2.0]]}}, False),
    ([[1.0, 2.0]], {"$array": {"kind": "float32", "shape": [1, 2], "data": [[1.0, 2.0]]}}, False),
    ([[1.0, 2.0]], {"$array": {"kind": "float", "shape": [1, 2], "data": [[1.0, 2.0]], "x": 1}}, False),
    (1.0, {"$unsupported": "Liar"}, False),
    (1.0, {"$unsupported": None}, False),
    ([1], {"$dict": "not pairs"}, False),
    ({"a": 1}, {"$dict": [[["a"], 1]]}, False),  # a list is no dict key
    (1, 2**64, False),  # integers beyond 63 bits are not plain data
]


@pytest.mark.parametrize(("expected", "encoded", "matches"), NUMBERS + STRUCTURES)
def test_compare(expected, encoded, matches) -> None:
    reason = compare(expected, decode(encoded), 1e-6)
    assert (reason is None) == matches, reason


FACTS = {"spec": ["data", None], "mesh": {"data": 8}, "num_devices": 8, "shard_shapes": [[1, 2]],
         "fully_replicated": False}


@pytest.mark.parametrize(("required", "facts", "ok"), [
    ({"spec": ["data", None], "num_devices": 8}, FACTS, True),
    ({"spec": [None, "data"]}, FACTS, False),
    ({"shard_shapes": [(1, 2)]}, FACTS, True),
    ({"fully_replicated": True}, FACTS, False),
    ({"num_devices": 8}, None, False),  # the trusted child could not place the declaration
])
def test_sharding_requirements_against_established_facts(required, facts, ok) -> None:
    assert meets(required, facts) == ok


FENCE = "```"
EXTRACTION = [
    (f"{FENCE}python\ndef f(x):\n    return x\n{FENCE}", "def f(x):\n    return x\n"),
    (f"{FENCE}python\ndef f(x):\n    return 1\n{FENCE}\nbetter:\n"
     f"{FENCE}python\ndef f(x):\n    return 2\n{FENCE}", "def f(x):\n    return 2\n"),
    (f"{FENCE}python\ndef f(x):\n    return 1\n{FENCE}\n{FENCE}python\nprint(f(2))\n{FENCE}",
     "def f(x):\n    return 1\n"),
    (f"<think>{FENCE}python\ndef f(x):\n    return 0\n{FENCE}</think>no code", None),
    (f"<think>plan\n{FENCE}python\ndef f(x):\n    return 0\n{FENCE}", None),  # thinking never finished
    (f"plan</think>{FENCE}python\ndef f(x):\n    return 5\n{FENCE}", "def f(x):\n    return 5\n"),
    ("def f(x):\n    return 3\n", "def f(x):\n    return 3\n"),
    ("just prose", None),
    (f"{FENCE}\ndef f(x):\n    return 4\n", "def f(x):\n    return 4\n"),  # unclosed, unlabelled
]


@pytest.mark.parametrize(("text", "code"), EXTRACTION)
def test_extract_code(text: str, code: str | None) -> None:
    assert extract_code(text, "f") == code


@pytest.mark.parametrize(("source", "denied"), [
    ("import socket", ["socket"]),
    ("from subprocess import run", ["subprocess"]),
    ("import os.path, ctypes.util", ["ctypes.util"]),
    ("import numpy as np\nimport jax", []),
    ("from . import socket", []),
    ("def f(:", []),  # does not parse: the child reports the syntax error
])
def test_denied_imports(source: str, denied: list[str]) -> None:
    assert denied_imports(source) == denied


# Wire data the service refuses before building anything (the reporter applies the same rules).
DEEP = [0]
for _ in range(40):
    DEEP = [DEEP]
REFUSED = {
    "too deep": DEEP,
    "too many items": [0] * 10_001,
    "too many items in nested lists": [[0] * 100] * 101,
    "string too long": "x" * 4097,
    "long strings count as items": ["x" * 4000] * 21,
    "integer beyond 63 bits": [2**63],
    "NaN": [float("nan")],
    "infinity": {"$dict": [["a", float("inf")]]},
    "tagged dict with a second key": {"$dict": [], "x": 1},
    "unknown tag": {"$set": [1, 2]},
    "dict pair of three": {"$dict": [[1, 2, 3]]},
    "array kind outside the vocabulary": {"$array": {"kind": "complex", "shape": [1], "data": [1]}},
    "array data deeper than its shape": {"$array": {"kind": "int", "shape": [1], "data": [[1]]}},
    "jax mesh of one axis pair too long": {"$jax": {"kind": "int", "shape": [1], "data": [1],
                                                   "mesh": [["x", 1, 2]], "spec": [None]}},
    "jax spec without a mesh": {"$jax": {"kind": "int", "shape": [1], "data": [1], "mesh": None, "spec": ["x"]}},
    "jax spec longer than the shape": {"$jax": {"kind": "int", "shape": [1], "data": [1],
                                               "mesh": [["x", 8]], "spec": ["x", None]}},
}


@pytest.mark.parametrize("name", REFUSED)
def test_wire_data_breaking_a_cap_decodes_to_unsupported(name: str) -> None:
    assert isinstance(decode(REFUSED[name]), Unsupported)


def test_well_formed_jax_claim_decodes_to_a_claim_only() -> None:
    wire = {"$jax": {"kind": "float", "shape": [2, 1], "data": [[1.0], [2.0]], "mesh": [["data", 2]],
                     "spec": [["data"], None]}}
    claim = decode(wire)
    assert isinstance(claim, JaxClaim)
    assert claim.mesh == (("data", 2),) and claim.spec == (("data",), None)
    assert claim.placement()["spec"] == [["data"], None]
