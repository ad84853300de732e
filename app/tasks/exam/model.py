"""Authored exam questions and how they become tasks.

A numeric question is a prompt template whose ``{name}`` placeholders are filled with the raw
quantities in ``args``, and an oracle whose parameters are exactly those names. The expected
answer is the oracle's output, in SI base units, written with the unit the question asks for.
A conceptual question is a prompt, a reference answer, a locator into the pinned book source
and a one-line rationale for why the reference is right."""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Number = int | float
Oracle = Callable[..., float | tuple[float, ...]]

# How a raw quantity is written in a prompt, and the pattern that reads it back.
NUMBER_PATTERN = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def format_number(value: Number) -> str:
    """Write a raw quantity so that float() of the text gives the same value back."""
    if isinstance(value, bool):
        raise TypeError("booleans are not quantities")
    if isinstance(value, int):
        return str(value)
    if value == int(value) and abs(value) < 1e5:
        return str(int(value))
    if 1e-3 <= abs(value) < 1e5:
        return repr(value)
    mantissa, exponent = f"{value:.12e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    text = f"{mantissa}e{int(exponent)}"
    if float(text) != value:  # more digits than 13 significant: fall back to the shortest repr
        text = repr(value)
    return text


def format_value(value: float, unit: str) -> str:
    """An expected value as quantity text the numeric grader parses ("0.017 s", "4.2e+11 FLOPs").
    Oracles return fractions; a "%" unit writes them as percentages."""
    if unit == "%":
        return f"{value * 100:.6g}%"
    return f"{value:.6g} {unit}".strip()


def placeholders(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


@dataclass(frozen=True)
class NumericQuestion:
    nnn: int
    items: tuple[str, ...]  # key-content item ids
    template: str
    args: Mapping[str, Number]
    oracle: Oracle
    units: tuple[str, ...]  # unit of each value the oracle returns, as written in the gold

    def prompt(self) -> str:
        return self.template.format(**{k: format_number(v) for k, v in self.args.items()})

    def answer_values(self) -> tuple[float, ...]:
        out = self.oracle(**self.args)
        return tuple(float(v) for v in (out if isinstance(out, tuple) else (out,)))

    def gold(self) -> tuple[str, ...]:
        values = self.answer_values()
        if len(values) != len(self.units):
            raise ValueError(f"oracle returned {len(values)} values for {len(self.units)} units")
        return tuple(format_value(v, u) for v, u in zip(values, self.units, strict=True))

    def parse_prompt(self, prompt: str) -> dict[str, float]:
        """Read the raw quantities back out of a rendered prompt (what the tests recompute from)."""
        pattern, seen = "", set()
        for literal, name, _, _ in string.Formatter().parse(self.template):
            pattern += re.escape(literal)
            if name in seen:  # a quantity stated twice must read the same both times
                pattern += f"(?P={name})"
            elif name:
                seen.add(name)
                pattern += f"(?P<{name}>{NUMBER_PATTERN})"
        m = re.fullmatch(pattern, prompt, re.DOTALL)
        if m is None:
            raise ValueError("prompt does not match its template")
        return {k: float(v) for k, v in m.groupdict().items()}

    def check_signature(self) -> None:
        params = list(inspect.signature(self.oracle).parameters)
        names = placeholders(self.template)
        if sorted(params) != sorted(self.args) or sorted(set(names)) != sorted(self.args):
            raise ValueError(
                f"oracle parameters {params}, placeholders {names} and args {sorted(self.args)} differ"
            )


def collector() -> tuple[list[NumericQuestion], Callable[..., Callable[[Oracle], Oracle]]]:
    """A chapter module's question list and its ``@numeric(nnn, items, units, template, **args)``
    decorator: the decorated function is the question's oracle, and its parameters are exactly
    the raw quantities the prompt states."""
    questions: list[NumericQuestion] = []

    def numeric(nnn: int, items: tuple[str, ...] | str, units: tuple[str, ...] | str, template: str,
                **args: Number) -> Callable[[Oracle], Oracle]:
        def register(oracle: Oracle) -> Oracle:
            question = NumericQuestion(
                nnn=nnn,
                items=(items,) if isinstance(items, str) else tuple(items),
                template=" ".join(template.split()),
                args=args,
                oracle=oracle,
                units=(units,) if isinstance(units, str) else tuple(units),
            )
            question.check_signature()
            questions.append(question)
            return oracle

        return register

    return questions, numeric


@dataclass(frozen=True)
class Locator:
    chapter: str
    start: int
    end: int
    sha256: str


@dataclass(frozen=True)
class ConceptQuestion:
    nnn: int
    items: tuple[str, ...]
    prompt: str
    reference: str
    locator: Locator
    rationale: str
