"""Natural spellings of a value grade right, and only the right value does.

Every row's expected value is computed by an oracle that is not our parser: sympy (through
math-verify's LaTeX reader) for arithmetic and LaTeX, pint's own default unit registry for units,
the book's printed figures for the book's own answers. Each right spelling is also graded against
a wrong value beside it (the value scaled by 1.25, and where the spelling starts with a number
that is not its value, that leading number): a parser that drops trailing math, reads a fraction
as its numerator or a prefix as nothing fails here.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import pint
import pytest
from math_verify import parse as mv_parse

from app.graders.numeric import grade_numeric
from app.graders.result import Outcome
from app.quantities import find_quantities, parse_quantity
from app.tasks.book.annotations import load_annotations

TOLERANCE = 0.02


@lru_cache(maxsize=1)
def _pint() -> pint.UnitRegistry:
    return pint.UnitRegistry()


def oracle_latex(expression: str) -> float:
    """The value sympy (math-verify's LaTeX reader) gives a LaTeX expression."""
    parsed = mv_parse(f"${expression}$")
    assert parsed, expression
    return float(parsed[0].evalf())


def oracle_units(expression: str, base: str) -> float:
    """pint's default registry: the quantity in ``base`` units."""
    return float(_pint().Quantity(expression).to(base).magnitude)


def _graded(gold: str, completion: str) -> Outcome:
    return grade_numeric([gold], completion, tolerance=TOLERANCE).outcome


# ---- arithmetic and LaTeX: (answer as written, the same value as LaTeX for the oracle) ----------
# The answer is written in a final-answer line; the oracle reads the LaTeX twin.
MATH = [
    # fractions
    ("1/4", r"\frac{1}{4}"), ("1/128", r"\frac{1}{128}"), ("3/8 of the parameters", r"\frac{3}{8}"),
    ("about 1/4 of the parameters", r"\frac{1}{4}"), ("-1/2", r"-\frac{1}{2}"), ("1 / 3", r"\frac{1}{3}"),
    ("32 / 4096", r"\frac{32}{4096}"), ("15/16", r"\frac{15}{16}"), ("7/8", r"\frac{7}{8}"),
    (r"$\frac{1}{4}$", r"\frac{1}{4}"), (r"$\frac13$", r"\frac13"), (r"$\frac1{3}$", r"\frac{1}{3}"),
    (r"$\dfrac{3}{4}$", r"\frac{3}{4}"), (r"$\tfrac{3}{4}$", r"\frac{3}{4}"), (r"$\cfrac{1}{3}$", r"\frac{1}{3}"),
    (r"$-\frac{10}{9}$", r"-\frac{10}{9}"), (r"$\frac{-10}{9}$", r"-\frac{10}{9}"),
    (r"$\frac{\frac{1}{2}}{3}$", r"\frac{1}{6}"), (r"$\frac{1.5}{2}$", r"\frac{3}{4}"),
    (r"$\left(\frac{1}{2}\right)$", r"\frac{1}{2}"), (r"$\frac{2^{10}}{4}$", r"256"),
    (r"$\frac{15 \times 10^9}{9 \times 10^{10}}$", r"\frac{15}{90}"), (r"$\frac{1}{2} + \frac{1}{4}$", r"\frac{3}{4}"),
    # display and inline math
    (r"\[ 9 \]", "9"), (r"$$ 9 $$", "9"), (r"\( 9 \)", "9"), (r"$9$", "9"), (r"$$\boxed{9}$$", "9"),
    (r"\[ x \approx 11 \]", "11"), (r"$x \approx 11$", "11"), (r"$B \approx 120$", "120"), ("x ≈ 11", "11"),
    (r"$P \approx 4G$", "4"), (r"$B^* = 240$", "240"), (r"$\approx 0.33$", r"\frac{1}{3}"),
    # digit groups
    ("1 000", "1000"), ("12 345 678", "12345678"), ("1,000", "1000"), ("61,000", "61000"),
    (r"$61{,}000$", "61000"), (r"$1\,000$", "1000"), ("1\u2009000", "1000"), ("17,920", "17920"),
    # simple arithmetic written as the answer
    ("(9+1)", "10"), ("9 + 1", "10"), ("(9 + 1) chips", "10"), ("2 × 4096", "8192"), ("2 * 4096", "8192"),
    (r"$2 \cdot 4096$", "8192"), (r"$2 \times 4096$", "8192"), ("16x16", "256"), ("16 x 16 chips", "256"),
    ("4x2", "8"), ("2(3)", "6"), ("(2)(3)", "6"), ("100 - 1", "99"), ("(10-1)", "9"), ("2^10", "1024"),
    ("2^{30}", "2^{30}"), (r"$2^{30}$", "2^{30}"), ("10^9", "10^9"), ("(1+1)^3", "8"), ("2^-1", r"\frac{1}{2}"),
    (r"$18 \div 4$", r"\frac{18}{4}"), ("1.5e9 / 3", "5 \\times 10^8"), ("(128 * 1024)^2", "17179869184"),
    # roots, pi and trailing math that changes the value
    (r"$4\sqrt{2}$", r"4\sqrt{2}"), (r"$4 \sqrt{2}$", r"4\sqrt{2}"), (r"$\sqrt{2}$", r"\sqrt{2}"),
    (r"$\sqrt2$", r"\sqrt{2}"), (r"$2\sqrt{3}$", r"2\sqrt{3}"), (r"$\frac{\sqrt{3}}{2}$", r"\frac{\sqrt{3}}{2}"),
    (r"$\sqrt[3]{8}$", "2"), (r"$4\pi$", r"4\pi"), (r"$2 \pi$", r"2\pi"), ("4√2", r"4\sqrt{2}"),
    (r"$\sqrt{16} \cdot 2$", "8"),
    # scientific notation
    ("1.2e9", "1.2 \\times 10^9"), ("1.2E9", "1.2 \\times 10^9"), (r"$1.2 \times 10^{9}$", "1.2 \\times 10^9"),
    ("1.2 × 10^9", "1.2 \\times 10^9"), ("1.2×10⁹", "1.2 \\times 10^9"), ("1.2 · 10^9", "1.2 \\times 10^9"),
    (r"$1.2 \cdot 10^{9}$", "1.2 \\times 10^9"), ("2.5x10^-5", "2.5 \\times 10^{-5}"), ("10¹²", "10^{12}"),
    ("-2.5e-3", "-0.0025"), (".5", "0.5"), ("0.50", "0.5"), ("+7", "7"),
    # percentages against a fraction
    ("25%", r"\frac{1}{4}"), (r"$25\%$", r"\frac{1}{4}"), ("25 percent", r"\frac{1}{4}"), ("0.25", r"\frac{1}{4}"),
    ("12.5 %", r"\frac{1}{8}"),
    # multipliers on counts
    ("1.5M", "1.5 \\times 10^6"), ("16K", "16000"), ("16k", "16000"), ("3.2T", "3.2 \\times 10^{12}"),
    ("1.5 million", "1.5 \\times 10^6"), ("70 billion", "7 \\times 10^{10}"), ("2 trillion", "2 \\times 10^{12}"),
    ("4 thousand", "4000"), ("7bn", "7 \\times 10^9"), ("128k context", "128000"),
]

# Leading numbers that a wrong parser would read in place of the value: they must score 0.
_LEADING = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _leading_number(answer: str) -> float | None:
    m = _LEADING.search(answer.replace(",", ""))
    return float(m.group()) if m else None


@pytest.mark.parametrize(("answer", "latex"), MATH, ids=[a for a, _ in MATH])
def test_math_spelling_grades_right_and_only_right(answer: str, latex: str) -> None:
    value = oracle_latex(latex)
    completion = f"Final answer: {answer}"
    assert _graded(repr(value), completion) is Outcome.correct
    assert _graded(repr(value * 1.25), completion) is not Outcome.correct
    leading = _leading_number(answer)
    if leading is not None and not math.isclose(leading, value, rel_tol=TOLERANCE):
        assert _graded(repr(leading), completion) is not Outcome.correct, "read as its leading number"


# ---- units: (answer, the same quantity as pint's default registry writes it, base unit) ---------
UNITS = [
    ("2.11e9 Hz", "2.11e9 Hz", "Hz"), ("2.11 GHz", "2.11 GHz", "Hz"), ("2110 MHz", "2110 MHz", "Hz"),
    ("1.75 GHz", "1.75e9 Hz", "Hz"), ("940 MHz", "940 MHz", "Hz"), ("1.5 kHz", "1.5 kHz", "Hz"),
    ("2.11e9 cycles/s", "2.11e9 Hz", "Hz"), ("44.3 d", "44.3 day", "s"), ("44.3 days", "44.3 day", "s"),
    ("6.3 weeks", "6.3 week", "s"), ("6.3 wk", "6.3 week", "s"), ("2 yr", "730.5 day", "s"),
    ("1.5 years", "547.875 day", "s"), ("3.5 h", "3.5 hour", "s"), ("90 min", "90 minute", "s"),
    ("1.42 ms", "1.42 ms", "s"), ("1420 µs", "1420 us", "s"), ("1420 us", "1420 us", "s"),
    ("1.42e-3 s", "1.42 ms", "s"),
    ("5 ks", "5000 s", "s"), ("250 ns", "250 ns", "s"), ("3 Ms", "3e6 s", "s"), ("12 ps", "12 ps", "s"),
    ("3.35 TB/s", "3.35 TB/s", "B/s"), ("3350 GB/s", "3.35 TB/s", "B/s"), ("26.8 Tbps", "26.8 Tbit/s", "B/s"),
    ("3.35 terabytes per second", "3.35 TB/s", "B/s"), ("4.5e10 bytes/s", "4.5e10 B/s", "B/s"),
    ("45 GB/s", "45 GB/s", "B/s"), ("400 Gbps", "400 Gbit/s", "B/s"), ("1.2 TB/s", "1.2 TB/s", "B/s"),
    ("80 GB", "80 GB", "B"), ("80e9 bytes", "80 GB", "B"), ("74.5 GiB", "74.5 GiB", "B"), ("16 KiB", "16 KiB", "B"),
    ("512 KiB", "512 KiB", "B"), ("1 TiB", "1 TiB", "B"), ("1.0995 TB", "1.0995 TB", "B"), ("4 TB", "4 TB", "B"),
    ("860 TB", "860 TB", "B"), ("8 Gb", "8 Gbit", "B"), ("2 PB", "2 PB", "B"), ("5.3GB", "5.3 GB", "B"),
    (r"$16\,\mathrm{GB}$", "16 GB", "B"), (r"$\boxed{16 \text{ GiB}}$", "16 GiB", "B"),
    (r"$3.35 \frac{TB}{s}$", "3.35 TB/s", "B/s"),
    ("18.4e9 bytes", "18.4 GB", "B"), ("2 × 80 GB", "160 GB", "B"), ("(9+1) GB", "10 GB", "B"),
]


@pytest.mark.parametrize(("answer", "pint_text", "base"), UNITS, ids=[a for a, _, _ in UNITS])
def test_unit_spelling_grades_right_and_only_right(answer: str, pint_text: str, base: str) -> None:
    value = oracle_units(pint_text, base)
    gold_unit = {"Hz": "Hz", "s": "s", "B/s": "B/s", "B": "B"}[base]
    completion = f"Final answer: {answer}"
    assert _graded(f"{value!r} {gold_unit}", completion) is Outcome.correct
    assert _graded(f"{value * 1.25!r} {gold_unit}", completion) is not Outcome.correct
    # the same number without its prefix or unit is another value, or another dimension
    assert _graded(repr(value), completion) is not Outcome.correct


# ---- B, M, K, T: counts where the quantity is a count, bytes where it is memory ----------------
# (answer, value as a count, or None if it cannot be one; value in bytes, or None)
COUNT_OR_BYTES = [
    ("70.6B", 70.6e9, 70.6), ("17.4B", 17.4e9, 17.4), ("212B total", 212e9, 212), ("70.6 B", 70.6e9, 70.6),
    ("70B params", 70e9, None), ("17.4B parameters", 17.4e9, None), ("1.4T tokens", 1.4e12, None),
    ("5B FLOPs", None, None), ("1.5M tokens", 1.5e6, None), ("16K tokens", 16e3, None), ("1.5M", 1.5e6, None),
    ("16K", 16e3, None), ("3.2T", 3.2e12, None), ("80 GB", None, 80e9), ("80GB", None, 80e9), ("80 KB", None, 80e3),
    ("2 MB", None, 2e6), ("512 kB", None, 512e3), ("256 chips", 256, None), ("8960 chips", 8960, None),
]


def _oracle_count(expr: float | None) -> float | None:
    return None if expr is None else oracle_latex(f"{expr!r}".replace("e+", "e"))


@pytest.mark.parametrize(("answer", "as_count", "as_bytes"), COUNT_OR_BYTES, ids=[a for a, _, _ in COUNT_OR_BYTES])
def test_b_m_k_t_read_by_what_the_gold_measures(answer: str, as_count, as_bytes) -> None:
    completion = f"Final answer: {answer}"
    if as_count is not None:
        assert _graded(repr(float(as_count)), completion) is Outcome.correct
        assert _graded(repr(float(as_count) * 1.25), completion) is not Outcome.correct
    if as_bytes is not None:
        assert _graded(f"{float(as_bytes)!r} bytes", completion) is Outcome.correct
        assert _graded(f"{float(as_bytes) * 1.25!r} bytes", completion) is not Outcome.correct
    # the bare leading number is neither reading unless it is the count itself
    leading = _leading_number(answer)
    if leading is not None and as_count != leading:
        assert _graded(repr(leading), completion) is not Outcome.correct


def test_a_quantity_with_two_readings_answers_one_value_only() -> None:
    # "70B" cannot be both the 70e9 parameters and the 70 bytes of a second required value
    result = grade_numeric(["70e9", "70 bytes"], "Final answer: 70B", tolerance=TOLERANCE)
    assert result.outcome is not Outcome.correct
    both = grade_numeric(["70e9", "140 GB"], "Final answer: 70B, 140 GB", tolerance=TOLERANCE)
    assert both.outcome is Outcome.correct


FLOPS = [("5B FLOPs", "5e9"), ("3.2T FLOPs", "3.2e12"), ("6e23 FLOPs", "6e23"), ("1.2 billion FLOPs", "1.2e9"),
         ("600 zettaFLOPs", "6e23"), ("2.5 PFLOPs", "2.5e15")]


@pytest.mark.parametrize(("answer", "number"), FLOPS, ids=[a for a, _ in FLOPS])
def test_operation_counts_take_multipliers(answer: str, number: str) -> None:
    value = oracle_latex(number.replace("e", r"\times 10^{") + "}")
    assert _graded(f"{value!r} FLOPs", f"Final answer: {answer}") is Outcome.correct
    assert _graded(f"{value * 1.25!r} FLOPs", f"Final answer: {answer}") is not Outcome.correct


# ---- wrong values that a lenient parser would pass: (gold as the oracle computes it, answer) ------
# Each answer's value differs from the gold; every row must score 0.
WRONG = [
    ("4", r"\boxed{4\sqrt{2}}"), ("4", r"Final answer: $4 \sqrt{2}$"), ("2", r"Final answer: $\sqrt{2}$"),
    ("4", r"Final answer: $4\pi$"), ("10", r"Final answer: $10 \log 2$"), ("10", r"Final answer: $10 \ln 2$"),
    ("1", "Final answer: 1/4"), ("4", "Final answer: 1/4"), ("1", r"Final answer: $\frac{1}{3}$"),
    ("3", r"Final answer: $\frac13$"), ("10", r"Final answer: $-\frac{10}{9}$"),
    ("1.111", r"Final answer: $-\frac{10}{9}$"),
    ("2", "Final answer: 2^{10}"), ("1", "Final answer: 1 000"), ("9", "Final answer: (9+1)"),
    ("70.6", "Final answer: 70.6B"), ("1.5", "Final answer: 1.5M"), ("16", "Final answer: 16K"),
    ("80 GB", "Final answer: 80 GB × 2"), ("80 GB", "Final answer: 80 GB * 2"), ("1 s", "Final answer: 1 s^2"),
    ("2.11", "Final answer: 2.11 GHz"), ("44.3", "Final answer: 44.3 d"), ("2 s", "Final answer: 2 s + 3 s"),
    ("-1 s", "Final answer: 2-3 s"), ("0.5", "Final answer: 1/0"), ("1", "Final answer: 1/0"),
    ("16", "Final answer: 16x16"), ("3", "Final answer: 3/8 of the parameters"), ("8", "Final answer: 3/8"),
    ("1 GB", "Final answer: 1 GiB"), ("1.2", r"Final answer: $1.2 \times 10^{9}$"), ("10", "Final answer: 10^9"),
    ("256", r"Final answer: $\sqrt{256}$"), ("2", r"Final answer: $2^{-1}$"), ("4", "Final answer: 4!"),
]


@pytest.mark.parametrize(("gold", "completion"), WRONG, ids=[c for _, c in WRONG])
def test_wrong_values_score_zero(gold: str, completion: str) -> None:
    assert _graded(gold, completion) is not Outcome.correct


# ---- the book's own answers, written as a final answer, grade right against its printed figure ---
def _book_figures() -> list[tuple[str, str, str]]:
    rows = []
    for key, ann in sorted(load_annotations().items()):
        for i, v in enumerate(ann.values):
            rows.append((f"{key}-{i}", v.value, v.figure))
    return rows


BOOK = _book_figures()
_UNIT_OF = re.compile(r"^\s*[-+]?[\d.,]+(?:e[-+]?\d+)?", re.IGNORECASE)


_BASE_UNIT = {"[information] / [time]": "bytes/s", "[information]": "bytes", "[time]": "s",
              "[operation]": "FLOPs", "[operation] / [time]": "FLOP/s", "[operation] / [information]": "FLOPs/byte",
              "1 / [time]": "Hz"}
BOOK_TOLERANCE = 0.05  # the book split's tolerance: "160kB" for 160 KiB is 2.4% off


@pytest.mark.parametrize(("row", "printed", "figure"), BOOK, ids=[r for r, _, _ in BOOK])
def test_the_books_own_answer_grades_right(row: str, printed: str, figure: str) -> None:
    # A bare figure ("= 295") is written with the printed value's unit, as a solver would.
    unit = _UNIT_OF.sub("", printed).strip()
    stated = find_quantities(figure)
    gold_dimension = parse_quantity(printed).dimension
    if unit and not any(q.reading(gold_dimension) is not None for q in stated):
        # a bare figure in base units ("514e9" for 514 GB/s) takes the base unit, else the printed one
        bare = [q.value for q in stated]
        in_base = bool(bare) and math.isclose(bare[-1], parse_quantity(printed).value, rel_tol=BOOK_TOLERANCE)
        figure = f"{figure} {_BASE_UNIT[gold_dimension] if in_base else unit}"
    outcome = grade_numeric([printed], f"Final answer: {figure}", tolerance=BOOK_TOLERANCE).outcome
    if figure in _BOOK_FIGURES_NOT_VALUES:
        assert outcome is not Outcome.correct, _BOOK_FIGURES_NOT_VALUES[figure]
    else:
        assert outcome is Outcome.correct, (row, printed, figure)


# Figures whose text is not the value itself (a derivation that needs another figure): listed so
# that a change that starts reading them is seen.
_BOOK_FIGURES_NOT_VALUES: dict[str, str] = {}


def test_the_table_is_large() -> None:
    spellings = len(MATH) + len(UNITS) + len(COUNT_OR_BYTES) + len(FLOPS) + len(WRONG) + len(BOOK)
    assert spellings >= 200


@pytest.mark.parametrize(
    "answer",
    ["(" * 5000 + "2" + ")" * 5000 + " s", "2" + " + 0" * 5000 + " s", "√" * 5000 + "4 s", "-" * 5000 + "2 s",
     "2" + "^2" * 5000 + " s", r"\frac{1}{2}" * 3000 + " s", r"\sqrt{" * 3000 + "4 s", "(9+1" * 3000],
)
def test_hostile_expressions_are_bounded_and_never_rewarded(answer: str) -> None:
    # nesting and length beyond the evaluator's bounds read as no expression, never a recursion
    # error or a slow grade; none of these is the 2 s asked for
    result = grade_numeric(["2 s"], f"Final answer: {answer}", tolerance=TOLERANCE)
    assert result.outcome is not Outcome.correct
