"""Does a task's tag name what the task exercises? A tag is checked against what the task's
solution computes: the physical quantities of its required values, and, for the parallelism
tags, whether any communication is computed at all.

A tag without a rule here is not checked. The rules are deliberately coarse, one line each, so
that a reviewer can see why a tag was refused: a memory tag on a task that computes no bytes and
no chip count from HBM, or an FSDP tag on a task that computes no communication (sizing the
optimizer state of one model is memory accounting, not FSDP)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.quantities import DIMENSIONLESS, parse_quantity
from app.tasks.base import Task
from app.tasks.tasks.conventions import API_DESCRIPTION

BYTES = "[information]"
TIME = "[time]"

_COMMUNICATION = re.compile(
    r"AllGather|AllReduce|ReduceScatter|AllToAll|all-gather|all-reduce|psum|collective|communicat|"
    r"\bICI\b|\bDCN\b|NVLink|link(?:s)? (?:carry|carries)|bidirectional|one-way|in each direction",
    re.IGNORECASE,
)
# Memory capacity, not bandwidth: "bytes of HBM each", "fits", "holds", "GiB chips", remat.
_MEMORY_WORDS = re.compile(
    r"bytes of HBM\b(?! bandwidth)|\bHBM (?:capacity|size)|\bfits?\b|\bhold(?:s|ing)?\b|GiB chips|"
    r"\bmemory (?:per|for|used|viewer|use)|\boptimizer state|\bAdam\b|rematerial|\bremat\b",
    re.IGNORECASE,
)
_KV = re.compile(r"\bKV[- ](?:cache|heads?)\b", re.IGNORECASE)
_BYTE_FIELD = re.compile(r"gib|gb|kib|mib|bytes?", re.IGNORECASE)
_BOOK_OWN = re.compile(r"^## Question\n", re.MULTILINE)


def own_text(task: Task) -> str:
    """The words of this task alone: a book prompt from its question on (not the chapter context
    it quotes), a rows prompt without the conventions block every rows task shares."""
    if task.split == "book":
        m = _BOOK_OWN.search(task.prompt)
        return task.prompt[m.end() :] if m else task.prompt
    if task.split == "tasks":
        return task.prompt.removeprefix(API_DESCRIPTION)
    return task.prompt


@dataclass(frozen=True, slots=True)
class Rule:
    why: str  # what the tag needs, in words
    holds: Callable[[Task, set[str]], bool]


def _memory(task: Task, dims: set[str]) -> bool:
    # bytes, or a count or cost sized from memory ("how many chips hold it", remat's FLOPs)
    return BYTES in dims or bool(_MEMORY_WORDS.search(own_text(task)))


def _communication(task: Task, dims: set[str]) -> bool:
    return bool(_COMMUNICATION.search(own_text(task)))


_MEMORY = Rule("computes bytes, or a chip count sized from memory", _memory)
_PARALLEL = Rule("computes a communication cost (a collective, a link, ICI, DCN or NVLink)", _communication)
# Data parallelism's item is its memory and its gradient AllReduce: either one.
_DATA_PARALLEL = Rule("computes a communication cost or the memory every replica holds",
                      lambda task, dims: _communication(task, dims) or _memory(task, dims))

RULES: dict[str, Rule] = {
    "training.memory": _MEMORY,
    "inference.memory": _MEMORY,
    "applied-inference.memory": _MEMORY,
    "profiling.memory": _MEMORY,
    "transformers.kv-cache": Rule(
        "computes bytes, or a cost that reads the KV cache",
        lambda task, dims: _memory(task, dims) or bool(_KV.search(own_text(task))),
    ),
    "training.fsdp": _PARALLEL,
    "training.data-parallel": _DATA_PARALLEL,
    "training.tensor-parallel": _PARALLEL,
    "training.mixed": _PARALLEL,
}


def gold_dimensions(task: Task) -> set[str] | None:
    """The dimensions of a numeric task's required values ({dimensionless} for rows tasks, whose
    prompt is read instead); None for judge and impl tasks."""
    if task.grading == "rows":  # a rows task's quantities are its fields: "kv_gib", "step_s"
        names = [str(f.get("name", "")) for f in task.meta.get("fields", ())]
        dims = {DIMENSIONLESS}
        if any(_BYTE_FIELD.search(n) for n in names):
            dims.add(BYTES)
        return dims
    if task.grading != "numeric":
        return None
    dims = set()
    for gold in task.gold:
        try:
            dims.add(parse_quantity(gold).dimension)
        except ValueError:
            return None
    return dims


def mistagged(task: Task) -> dict[str, str]:
    """tag -> what it needs that the task does not compute (numeric tasks; others pass)."""
    dims = gold_dimensions(task)
    if dims is None:
        return {}
    return {tag: RULES[tag].why for tag in task.tags if tag in RULES and not RULES[tag].holds(task, dims)}
