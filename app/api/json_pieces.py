"""Parse and validate a large JSON body a list element at a time, with the result and the errors
pydantic gives for the whole body.

``model.model_validate_json`` holds the interpreter lock from the first byte to the last. Here
each element of the body's top-level lists (found by app/api/json_budget.py, which also bounds
each element's size) is validated on its own, and the rest of the body (its lists emptied: the
"envelope") once, so no single parse is larger than one bounded piece: between two pieces the
interpreter hands the lock over to any other thread. The API parses large bodies in a grading
process (app/api/bodies.py), where this bounds the work and memory of each step; called on a
thread of the loop's own process, the loop would wait for one element at most.

The answer is the same as the whole body's: each piece is validated by the same validator the
model applies to it (the element type, with the model's configuration), errors are put back in
the order pydantic reports them (fields in declaration order, a list's elements in order, then
unknown keys), and a body that is not valid JSON anywhere (nested past the parser's limit
included: an element parsed alone sits two levels shallower than in the body) is refused as one.
A model this cannot reproduce exactly (validators on the model or its lists, aliases, a list key
given twice) is validated whole."""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError, create_model

from app.api.json_budget import MAX_ELEMENT_VALUES, Outline
from app.errors import ApiError

M = TypeVar("M", bound=BaseModel)


class InvalidBody(Exception):
    """The body's validation errors, as ``ValidationError.errors()`` lists them for the whole body."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


class _Lists:
    """How a model's list fields are validated piece by piece: field -> (element validator,
    the list's own constraints)."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.fields: dict[str, tuple[TypeAdapter[Any], TypeAdapter[Any]]] = {}
        decorators = model.__pydantic_decorators__
        if decorators.model_validators or decorators.field_validators or decorators.validators or (
                decorators.root_validators):
            return  # they see the whole model: validate it whole
        for name, info in model.model_fields.items():
            element = _element_type(info.annotation)
            if element is None or info.alias not in (None, name) or info.validation_alias not in (None, name):
                continue
            config = None if isinstance(element, type) and issubclass(element, BaseModel) else model.model_config
            whole_list: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            self.fields[name] = (TypeAdapter(element, config=config), TypeAdapter(whole_list))


def _element_type(annotation: Any) -> Any | None:
    """X for ``list[X]`` or ``list[X] | None``, else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        lists = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(lists) != 1:
            return None
        annotation = lists[0]
    if typing.get_origin(annotation) is list and len(args := typing.get_args(annotation)) == 1:
        return args[0]
    return None


@cache
def _lists(model: type[BaseModel]) -> _Lists:
    return _Lists(model)


@cache
def _envelope(model: type[BaseModel], emptied: frozenset[str]) -> type[BaseModel]:
    """``model`` with the emptied lists taking anything (their elements are validated apart)."""
    fields: dict[str, Any] = {name: (Any, ... if model.model_fields[name].is_required() else None)
                              for name in emptied}
    return create_model(f"{model.__name__}Envelope", __base__=model, **fields)


def _errors(exc: ValidationError, prefix: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [{**e, "loc": (*prefix, *e["loc"])} for e in exc.errors(include_url=False)]


def _nesting_refusal() -> tuple[int, dict[str, Any]]:
    """The fewest arrays around a value that the JSON parser refuses, and its error for it
    (found by asking the parser, so that a new pydantic's limit is the one applied)."""
    low, high = 1, 4096  # low parses, high is refused
    while high - low > 1:
        middle = (low + high) // 2
        try:
            TypeAdapter(Any).validate_json(b"[" * middle + b"0" + b"]" * middle)
            low = middle
        except ValidationError:
            high = middle
    try:
        TypeAdapter(Any).validate_json(b"[" * high + b"0" + b"]" * high)
    except ValidationError as exc:
        return high, {**exc.errors(include_url=False, include_input=False)[0], "loc": ()}
    raise AssertionError("the parser refused this depth a moment ago")


_TOO_DEEP, _TOO_DEEP_ERROR = _nesting_refusal()


def validate_in_pieces(model: type[M], raw: bytes, outline: Outline) -> M:
    """``model.model_validate_json(raw)``, a list element at a time (see the module docstring):
    the model, or ValidationError or InvalidBody with the errors the whole body gives."""
    if outline.depth >= _TOO_DEEP:  # an element alone would be two levels shallower
        raise InvalidBody([_TOO_DEEP_ERROR])
    lists = _lists(model).fields
    split = {name: spans for name, (_, spans) in outline.arrays.items() if name in lists}
    if outline.repeated & split.keys():
        split = {}
    # What is not split (other fields, ignored ones, or the whole body) is parsed in one go,
    # holding the interpreter lock throughout: bounded like one piece.
    if sum(n for name, n in outline.values.items() if name not in split) > MAX_ELEMENT_VALUES:
        raise ApiError(413, "body_too_complex",
                       f"this body holds more than {MAX_ELEMENT_VALUES} JSON values outside its lists' items")
    if not split:
        return model.model_validate_json(raw)
    # The envelope: the body with each split list emptied.
    parts, at = [], 0
    for (start, end), _ in sorted(outline.arrays[name] for name in split):
        parts += [raw[at:start], b"[]"]
        at = end
    envelope_raw = b"".join([*parts, raw[at:]])
    errors: dict[str, list[dict[str, Any]]] = {}
    envelope: BaseModel | None = None
    try:
        envelope = _envelope(model, frozenset(split)).model_validate_json(envelope_raw)
    except ValidationError as exc:
        for e in _errors(exc, ()):
            errors.setdefault(str(e["loc"][0]) if e["loc"] else "", []).append(e)
    values: dict[str, list[Any]] = {}
    for name, spans in split.items():
        element, whole_list = lists[name]
        found: list[Any] = []
        for i, (start, end) in enumerate(spans):  # the lock is handed over between elements
            try:
                found.append(element.validate_json(raw[start:end]))
            except ValidationError as exc:
                errors.setdefault(name, []).extend(_errors(exc, (name, i)))
        if name not in errors:
            try:
                values[name] = whole_list.validate_python(found)
            except ValidationError as exc:
                errors[name] = _errors(exc, (name,))
    if errors:
        raise _as_one(model, errors)
    assert envelope is not None  # no errors: the envelope validated
    fields = {name: getattr(envelope, name) for name in model.model_fields}
    return model.model_construct(_fields_set=envelope.model_fields_set, **{**fields, **values})


def _as_one(model: type[BaseModel], errors: dict[str, list[dict[str, Any]]]) -> InvalidBody:
    """The errors as validating the whole body reports them: one json_invalid if any piece is
    not JSON, else fields in declaration order and then the rest (unknown keys)."""
    every = [e for found in errors.values() for e in found]
    invalid = next((e for e in every if e["type"] == "json_invalid"), None)
    if invalid is not None:
        return InvalidBody([{**invalid, "loc": ()}])
    ordered = [e for name in model.model_fields for e in errors.pop(name, [])]
    return InvalidBody(ordered + [e for found in errors.values() for e in found])
