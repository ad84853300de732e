"""A large body validated a list element at a time gives what validating it whole gives: the same
model, or the same errors in the same order (so the same 4xx message), for valid bodies and for
hundreds of broken ones. The oracle is pydantic's own ``model_validate_json`` on the same bytes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.api.errors import describe_validation_errors
from app.api.json_budget import outline_json
from app.api.json_pieces import InvalidBody, validate_in_pieces
from app.api.rewards import GetRewardRequest, LabelledRequest
from app.grading.models import GradeBatchRequest

ROWS = [{"name": "r", "x": i + 0.5} for i in range(20)]


def _bodies(rng: random.Random) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    item = lambda i: rng.choice([  # noqa: E731
        {"task_id": f"synthetic/{i}/1", "completion": f"Final answer: {i} s"},
        {"reference": {"values": ["1 s", "2 GB"]}, "completion": "Final answer: 1 s, 2 GB"},
        {"reference": {"rows": ROWS}, "completion": json.dumps({"rows": ROWS})},
    ])
    n = rng.randint(1, 12)
    return [
        (GradeBatchRequest, {"items": [item(i) for i in range(n)]}),
        (GetRewardRequest, {"query": [f"q{i} Final answer: 1 s" for i in range(n)],
                            "prompts": [f"q{i}" for i in range(n)], "labels": ["1 s"] * n}),
        (LabelledRequest, {"items": [{"label": {"rows": ROWS}, "completion": {"messages": [
            {"role": "assistant", "content": "Final answer: 1 s"}]}} for _ in range(n)], "tolerance": 0.1}),
    ]


def _broken(rng: random.Random, body: dict[str, Any]) -> bytes:
    """The body with one thing wrong: in its JSON text, or in a value, a key or a list."""
    body = json.loads(json.dumps(body))
    lists = [k for k, v in body.items() if isinstance(v, list) and v]
    name = rng.choice(lists)
    i = rng.randrange(len(body[name]))
    kind = rng.randrange(12)
    if kind == 0:
        body[name][i] = 5
    elif kind == 1 and isinstance(body[name][i], dict):
        body[name][i]["unknown<b>"] = 1
    elif kind == 2:
        body["extra_field"] = [1, 2]
    elif kind == 3:
        body[name] = []
    elif kind == 4:
        body[name] = "not a list"
    elif kind == 5 and isinstance(body[name][i], dict):
        body[name][i].pop(next(iter(body[name][i])))
    elif kind == 6:
        for j in range(len(body[name])):
            body[name][j] = None if j % 2 else body[name][j]
    elif kind == 7:
        body.pop(name)
    elif kind == 8:
        body["tolerance"] = "high"
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()
    if kind == 9:  # a byte of the text removed, changed or added
        at = rng.randrange(len(raw))
        raw = raw[:at] + rng.choice([b"", b"{", b"]", b",", b":", b'"', b"\\", b"x", b"\xff"]) + raw[at + 1:]
    elif kind == 10:  # a list key given twice
        raw = raw[:-1] + b', "' + name.encode() + b'": []}'
    elif kind == 11:
        raw = raw + rng.choice([b" ", b"x", b"[]", b"\n"])
    return raw


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "ok", run().model_dump()
    except ValidationError as exc:
        errors = list(exc.errors(include_input=False))
    except InvalidBody as exc:
        errors = exc.errors
    listed = [(e["type"], tuple(e["loc"]), e["msg"]) for e in errors]
    return "refused", (describe_validation_errors(errors, located=False), listed if errors[0]["type"] != "json_invalid"
                       else None)


@pytest.mark.parametrize("seed", range(40))
def test_pieces_give_what_the_whole_body_gives(seed: int) -> None:
    rng = random.Random(seed)
    for model, body in _bodies(rng):
        for raw in [json.dumps(body).encode(), *(_broken(rng, body) for _ in range(8))]:
            whole = _outcome(lambda: model.model_validate_json(raw))  # noqa: B023
            pieces = _outcome(lambda: validate_in_pieces(model, raw, outline_json(raw, 512)))  # noqa: B023
            assert pieces == whole, raw[:300]


def test_a_valid_body_is_really_validated_a_piece_at_a_time() -> None:
    """Not the whole-body fallback: the outline finds the list, and the result is the model's."""
    body = {"items": [{"task_id": "synthetic/0/1", "completion": "Final answer: 1 s"}] * 3}
    raw = json.dumps(body).encode()
    outline = outline_json(raw, 512)
    assert set(outline.arrays) == {"items"} and len(outline.arrays["items"][1]) == 3
    parsed = validate_in_pieces(GradeBatchRequest, raw, outline)
    assert parsed == GradeBatchRequest.model_validate_json(raw)
