"""Simple arithmetic written as an answer: ``(9+1)``, ``1/4``, ``3 × 80``, ``4√2``, ``2^30``.

A model often states its answer as the expression it computed (``1/4 of the parameters``,
``(9+1) chips``), and a value followed by more math (``4√2``) is not the leading number. This
reads such an expression from a position in normalised answer text and evaluates it in floating
point, or says that it cannot. It is a small recursive-descent parser with hard bounds (tokens,
nesting, exponent size), so candidate text can never make it slow, deep or exact-integer huge.

Grammar (whitespace allowed between tokens)::

    expr    := term (("+" | "-") term)*
    term    := power ((("*" | "×" | "·" | "x" | "/") power) | implicit)*
    power   := unary ("^" unary)?          (right-associative through unary -> primary)
    unary   := "-" unary | primary
    primary := NUMBER | "(" expr ")" | "√" primary | "π"

``implicit`` multiplication is a number glued to "(" (``2(3)``) or followed by "√" or "π"
(``4√2``, ``2π``): a spaced parenthesis (``256 (16 x 16)``) is an aside, not a factor.
A hyphen glued between two numbers outside parentheses (``2-3 s``) is a range, not a
subtraction: the expression stops before it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_TOKENS = 64  # operands and operators in one expression: no answer needs more
MAX_DEPTH = 8  # nested parentheses or roots

_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,4})?")
_SPACE = re.compile(r"[ \t]*")
_TIMES = frozenset("*×·")


class NotArithmetic(Exception):
    """The text at this position is not an expression this module reads."""


class TooLong(NotArithmetic):
    """An expression past the bounds: it is read as one value that matches nothing (nan), and
    the scan goes on after it, so a long run of math costs linear time, not a parse per number."""


@dataclass(frozen=True, slots=True)
class Evaluated:
    value: float
    end: int  # position just after the expression
    compound: bool  # True when an operator, parenthesis, root or constant was read


class _Parser:
    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos
        self.tokens = 0
        self.depth = 0
        self.compound = False

    # -- helpers ---------------------------------------------------------------------------
    def _skip(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _count(self) -> None:
        self.tokens += 1
        if self.tokens > MAX_TOKENS:
            raise TooLong("too long")

    def _operand_follows(self, at: int) -> bool:
        """Whether an operand starts at ``at`` (after spaces): a digit, ".5", "(", "√", "π" or "-"."""
        m = _SPACE.match(self.text, at)
        i = m.end() if m else at
        if i >= len(self.text):
            return False
        c = self.text[i]
        if c.isdigit() or c in "(√π":
            return True
        if c == "." and i + 1 < len(self.text) and self.text[i + 1].isdigit():
            return True
        return c == "-" and self._operand_follows(i + 1) and (i + 1 < len(self.text) and self.text[i + 1] != "-")

    # -- grammar ---------------------------------------------------------------------------
    def expr(self, nested: bool) -> float:
        value = self.term(nested)
        while True:
            save = self.pos
            before_space = self.pos
            self._skip()
            op = self._peek()
            if op not in ("+", "-"):
                self.pos = save
                return value
            spaced_before = self.pos > before_space
            after = self.pos + 1
            spaced_after = after < len(self.text) and self.text[after] in " \t"
            if op == "-" and not nested and not spaced_before and not spaced_after:
                self.pos = save  # "2-3": a range, not a subtraction
                return value
            if not self._operand_follows(after):
                self.pos = save  # "20.4 +/- 0.5": not an operator here
                return value
            self.pos = after
            self._count()
            self.compound = True
            rhs = self.term(nested)
            value = value + rhs if op == "+" else value - rhs

    def term(self, nested: bool) -> float:
        value = self.power(nested)
        while True:
            save = self.pos
            glued = self._peek()
            if glued == "(":  # "2(3)": a glued parenthesis multiplies
                self.compound = True
                value *= self.power(nested)
                continue
            self._skip()
            op = self._peek()
            if op in ("√", "π"):  # "4√2", "4 √2", "2π"
                self.compound = True
                value *= self.power(nested)
                continue
            is_x = op in ("x", "X") and not self._letter_at(self.pos + 1)
            if (op in _TIMES or op == "/" or is_x) and self._operand_follows(self.pos + 1):
                self.pos += 1
                self._count()
                self.compound = True
                rhs = self.power(nested)
                value = _divide(value, rhs) if op == "/" else value * rhs
                continue
            self.pos = save
            return value

    def _letter_at(self, i: int) -> bool:
        return i < len(self.text) and self.text[i].isalpha()

    def power(self, nested: bool) -> float:
        base = self.unary(nested)
        save = self.pos
        self._skip()
        if self._peek() == "^" and self._operand_follows(self.pos + 1):
            self.pos += 1
            self._count()
            self.compound = True
            exponent = self.unary(nested)
            return _pow(base, exponent)
        self.pos = save
        return base

    def unary(self, nested: bool) -> float:
        self._skip()
        if self._peek() == "-":
            self.pos += 1
            self._count()
            return -self.unary(nested)
        return self.primary(nested)

    def primary(self, nested: bool) -> float:
        self._skip()
        self._count()
        c = self._peek()
        if c == "(":
            self._enter()
            self.pos += 1
            self.compound = True
            value = self.expr(nested=True)
            self._skip()
            if self._peek() != ")":
                raise NotArithmetic("unclosed parenthesis")
            self.pos += 1
            self.depth -= 1
            return value
        if c == "√":
            self._enter()
            self.pos += 1
            self.compound = True
            value = self.power(nested)
            self.depth -= 1
            return math.sqrt(value) if value >= 0 else math.nan
        if c == "π":
            self.pos += 1
            self.compound = True
            return math.pi
        m = _NUMBER.match(self.text, self.pos)
        if m is None:
            raise NotArithmetic("no operand")
        self.pos = m.end()
        digits = m.group()
        return float(digits.replace(",", "") if "," in digits else digits)

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TooLong("nested too deeply")


def _divide(top: float, bottom: float) -> float:
    """A division by zero is a value no gold matches (inf, or nan for 0/0), never an error that
    would let the scanner fall back to reading the numerator alone."""
    if bottom == 0.0:
        return math.nan if top == 0.0 or math.isnan(top) else math.inf
    return top / bottom


def _pow(base: float, exponent: float) -> float:
    """Floating-point power: a huge exponent overflows to inf (or underflows to 0) at once."""
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf
    except ValueError:  # 0 to a negative power, or a negative base to a fractional one
        return math.nan if base < 0 else math.inf


def evaluate_at(text: str, pos: int) -> Evaluated | None:
    """The expression starting at ``pos``, or None when none starts there (or it is
    malformed, too long or too deep). A bare number comes back with ``compound`` False."""
    parser = _Parser(text, pos)
    try:
        value = parser.expr(nested=False)
    except TooLong:
        return Evaluated(math.nan, max(parser.pos, pos + 1), True)
    except NotArithmetic:
        return None
    except RecursionError:  # bounded by MAX_DEPTH and MAX_TOKENS; never expected
        return None
    return Evaluated(value, parser.pos, parser.compound)
