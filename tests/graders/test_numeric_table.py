"""The numeric grader as a table of (reference, completion, expected outcome), by theme."""

from __future__ import annotations

import pytest

from app.graders.numeric import grade_numeric
from app.graders.result import Outcome

C, I, N, U = Outcome.correct, Outcome.incorrect, Outcome.no_answer, Outcome.unit_mismatch

UNITS = [
    (["3.35 TB/s"], "Final answer: 3.35e12 bytes/s", C),
    (["3.35 TB/s"], "Final answer: 3350 GB/s", C),
    (["3.35 TB/s"], "Final answer: 3.35 TBps", C),
    (["3.35 TB/s"], "Final answer: 26.8 Tbps", C),
    (["3.35 TB/s"], "Final answer: 3.35 terabytes per second", C),
    (["1.5 ms"], "Final answer: 1500 µs", C),
    (["1.5 ms"], "Final answer: 1500 us", C),
    (["1.5 ms"], "Final answer: 1500 μs", C),
    (["1.5 ms"], "Final answer: 1.5e6 ns", C),
    (["1.5 ms"], "Final answer: 0.0015 s", C),
    (["1.5 ms"], "Final answer: 1.5 milliseconds", C),
    (["2 hours"], "Final answer: 120 minutes", C),
    (["2 hours"], "Final answer: 7200 s", C),
    (["3 days"], "Final answer: 72 hours", C),
    (["3 days"], "Final answer: 259200 seconds", C),
    (["197 TFLOP/s"], "Final answer: 1.97e14 FLOPs/s", C),
    (["197 TFLOP/s"], "Final answer: 197 TFLOPS", C),
    (["197 TFLOP/s"], "Final answer: 0.197 PFLOP/s", C),
    (["394 TOPS"], "Final answer: 3.94e14 OPs/s", C),
    (["6e23 FLOPs"], "Final answer: 6e23 FLOP", C),
    (["6e23 FLOPs"], "Final answer: 600 zettaFLOPs", C),
    (["683 FLOPs/byte"], "Final answer: 682.67 FLOPs/byte", C),
    (["683 FLOPs/byte"], "Final answer: 683 FLOPs per byte", C),
    (["45%"], "Final answer: 45 %", C),
    (["45%"], "Final answer: 0.45", C),
    (["45%"], "Final answer: 45 percent", C),
    (["256 chips"], "Final answer: 256 chips", C),
    (["256 chips"], "Final answer: 256", C),
    (["256 chips"], "Final answer: 256 TPUs", C),
    (["1.4e12 tokens"], "Final answer: 1.4T tokens", C),
    (["70e9 params"], "Final answer: 70B params", C),
    (["70e9 params"], "Final answer: 70 billion parameters", C),
    (["8 layers"], "Final answer: 8", C),
    (["11.4 tokens/s"], "Final answer: 11.4 tokens per second", C),
]

PREFIXES_BINARY_DECIMAL = [
    (["1 GiB"], "Final answer: 1 GiB", C),
    (["1 GiB"], "Final answer: 1024 MiB", C),
    (["1 GiB"], "Final answer: 1073741824 bytes", C),
    (["1 GiB"], "Final answer: 1.0737 GB", C),
    (["1 GiB"], "Final answer: 1 GB", I),
    (["1 GB"], "Final answer: 1 GiB", I),
    (["80 GB"], "Final answer: 80e9 B", C),
    (["80 GB"], "Final answer: 80000 MB", C),
    (["80 GB"], "Final answer: 0.08 TB", C),
    (["16 KiB"], "Final answer: 16384 bytes", C),
    (["16 kB"], "Final answer: 16 KB", C),
    (["1 TiB"], "Final answer: 1.0995 TB", C),
    (["8 Gb"], "Final answer: 1 GB", C),
    (["1 PB"], "Final answer: 1000 TB", C),
]

LATEX = [
    (["1.2e9 FLOPs"], r"Final answer: $1.2 \times 10^{9}$ FLOPs", C),
    (["1.2e9 FLOPs"], r"Final answer: $1.2 \times 10^{9} \text{ FLOPs}$", C),
    (["3.35 TB/s"], r"The answer is $\boxed{3.35\,\mathrm{TB/s}}$", C),
    (["3.35 TB/s"], r"$\boxed{3.35 \text{TB/s}}$", C),
    (["1.5 µs"], r"Final answer: $1.5\,\mu s$", C),
    (["1e9"], "Final answer: 10^9", C),
    (["1073741824 bytes"], "Final answer: 2^{30} bytes", C),
    (["1234567 FLOPs"], "Final answer: 1,234,567 FLOPs", C),
    (["45%"], r"Final answer: $45\%$", C),
    (["2.5e-5 s"], "Final answer: 2.5 × 10^-5 s", C),
    (["2.5e-5 s"], "Final answer: 2.5x10^-5 s", C),
    (["1000 GB"], r"Final answer: $1{,}000$ GB", C),
    (["2 s"], r"\boxed{\phantom{ 2 s} 3 s}", I),  # \phantom shows nothing: the visible answer is 3 s
    (["3 s"], r"\boxed{\phantom{2 s}3 s}", C),
    (["2 s"], r"\boxed{\hphantom{\text{2 s}} 3 s}", I),
]

BOXED_VS_FINAL = [
    (["2 s"], r"\boxed{1 s} ... Final answer: 2 s", C),
    (["2 s"], "Final answer: 1 s. On reflection, \\boxed{2 s}", C),
    (["2 s"], r"Final answer: \boxed{2 s}", C),
    (["2 s"], "**Final answer:** 2 s", C),
    (["2 s"], "Final Answer: 2 s", C),
    (["2 s"], "final answer: 2 s", C),
    (["2 s"], "Final answer:\n\n2 s", C),
    (["2 s"], r"\boxed{\text{2 s}}", C),
    (["2 s"], r"\boxed{{2} s}", C),
]

SEVERAL_VALUES = [
    (["3.35 TB/s", "80 GB"], "Final answer: 3.35 TB/s, 80 GB", C),
    (["3.35 TB/s", "80 GB"], "Final answer: 80 GB and 3.35 TB/s", C),
    (["3.35 TB/s", "80 GB"], "Final answer: 3.35 TB/s", I),
    (["3.35 TB/s", "80 GB"], "Final answer: 3.35 TB/s, 90 GB", I),
    (["1 ms", "2 ms"], "Final answer: 1 ms, 2 ms", C),
    (["1 ms", "2 ms"], "Final answer: 2 ms, 1 ms", I),
    (["1e15 FLOPs", "10 s"], "Final answer: 1e15 FLOPs in 10 s", C),
    (["80 GB"], "Final answer: 80 GB (74.5 GiB)", C),
]

WRONG_DIMENSION = [
    (["80 GB"], "Final answer: 80 GB/s", U),
    (["80 GB"], "Final answer: 80 s", U),
    (["80 GB"], "Final answer: 80", U),
    (["1 ms"], "Final answer: 1 GB", U),
    (["197 TFLOP/s"], "Final answer: 197e12 FLOPs", U),
    (["683 FLOPs/byte"], "Final answer: 683", U),
    (["1 ms"], "Final answer: 1 ms of 5 GB", C),
]

NO_ANSWER = [
    (["2 s"], "The time is 2 s.", N),
    (["2 s"], "", N),
    (["2 s"], "Final answer: unknown", N),
    (["2 s"], "Final answer:", N),
    (["2 s"], r"\boxed{", N),
    (["2 s"], "<think>Final answer: 2 s</think>", N),
    (["2 s"], "<think>still thinking, Final answer: 2 s", N),
]

ADVERSARIAL = [
    (["2 s"], "Final answer: 1 s\nFinal answer: 2 s", C),
    (["2 s"], "Final answer: 2 s\nFinal answer: 1 s", I),
    (["2 s"], "```\nFinal answer: 2 s\n```\nFinal answer: 3 s", I),
    (["2 s"], "Final answer: 3 s\n```python\nprint(r'\\boxed{2 s}')\n```", I),
    (["2 s"], "Final answer: 3 s and `\\boxed{2 s}`", I),
    (["2 s"], "<think>Final answer: 9 s</think>Final answer: 2 s", C),
    (["2 s"], "reasoning...</think>\nFinal answer: 2 s", C),
    (["2 s"], "Final answer: 1 s, 2 s, 3 s, 4 s", I),
    (["2 s"], "Final answer: NaN s", N),
    (["2 s"], "Final answer: -2 s", I),
    (["2 s"], "Final answer: 1e400 s", I),
    # look-alike final-answer lines: the last line a reader sees is the one graded
    (["2 s"], "Final answer: 2 s\nFinal\u200b answer: 3 s", I),
    (["2 s"], "Final answer: 2 s\nＦｉｎａｌ ａｎｓｗｅｒ： 3 s", I),
    (["2 s"], "Final answer: 2 s\nFinal\u00ad answer\u2060: 3 s", I),
    (["2 s"], "Final answer: 3 s\nFinal\u200b answer: 2\u200b s", C),
    (["2 s"], "Final answer: ２ s", C),
    (["2 s"], "Final answer: 0^-1 s", I),  # a division by zero once raised: an unscored error
    (["2 s"], "Final answer: 0^{-3} s, 2 s", I),
    (["2 GB"], "Final answer: H100 has 2 GB", C),
    (["2 s"], "Final answer: 2 s" + " padding" * 2000, C),
    (["0 s"], "Final answer: 0 s", C),
    (["0 s"], "Final answer: 1 s", I),
]

# Right answers written the way people write them: the central value of "±", superscript
# exponents, \frac, SI thin-space digit groups, and corrections with the old value struck through.
RIGHT_ANSWERS_READ_RIGHT = [
    (["20.4 s"], "Final answer: 20.4 ± 0.1 s", C),
    (["20.4 s"], "Final answer: (20.4 ± 0.1) s", C),
    (["20.4 s"], "Final answer: 20.4 s ± 0.1 s", C),
    (["20.4 s"], r"Final answer: $20.4 \pm 0.1$ s", C),
    (["20.4 s"], "Final answer: 20.4 +/- 0.5 s", C),
    (["0.1 s"], "Final answer: 20.4 ± 0.1 s", I),  # the error term is not the answer
    (["20.4 s", "3 GB"], "Final answer: 20.4 s ± 0.1 s, 3 GB", C),
    (["20.4 s"], "Final answer: 2.04 × 10¹ s", C),
    (["2.5e-5 s"], "Final answer: 2.5 × 10⁻⁵ s", C),
    (["1e12 FLOPs"], "Final answer: 10¹² FLOPs", C),
    (["0.5 s"], r"Final answer: $\frac{1}{2}$ s", C),
    (["0.75"], r"Final answer: $\dfrac{3}{4}$", C),
    (["3.35 TB/s"], r"Final answer: $3.35 \frac{\text{TB}}{\text{s}}$", C),
    (["1234567 FLOPs"], "Final answer: 1\u2009234\u2009567 FLOPs", C),
    (["1234567 FLOPs"], "Final answer: 1\u202f234\u202f567 FLOPs", C),
    (["1024 chips"], r"Final answer: $1\,024$ chips", C),
    (["2 s"], "Final answer: ~~3 s~~ 2 s", C),
    (["2 s"], "Final answer: <s>3 s</s> 2 s", C),
    (["2 s"], "Final answer: <del>3 s</del> 2 s", C),
    (["2 s"], "Final answer: <strike>3 s</strike> 2 s", C),
    (["2 s"], r"Final answer: \sout{3 s} 2 s", C),
    (["3 s"], "Final answer: ~~3 s~~ 2 s", I),  # a struck value is retracted
    (["2 s"], "Final answer: 2 s <s>unclosed strike", C),
]

# Only the visible answer: HTML comments are hidden text, like reasoning blocks.
HIDDEN_TEXT = [
    (["2 s"], "Final answer: 2 s\n<!-- Final answer: 3 s -->", C),
    (["3 s"], "Final answer: 2 s\n<!-- Final answer: 3 s -->", I),
    (["3 s"], "Final answer: 2 s <!-- \\boxed{3 s} -->", I),
    (["3 s"], "Final answer: 2 s\n<!-- never closed\nFinal answer: 3 s", I),
    (["2 s"], "<!-- draft -->Final answer: 2 s", C),
]

# Candidate text that once made the grader fail (an unscored error) is a scored 0 now.
PATHOLOGICAL = [
    (["2 s"], "Final answer: 2 " + "per s " * 1000, U),
    (["2 s"], "Final answer: 2 s" + "/s" * 5000, U),
    (["2 s/s"], "Final answer: 2 " + " * ".join(["s"] * 3000), U),
    (["2 s"], "Final answer: 2 " + "GB·" * 2000 + "s", U),
    (["2 s"], "Final answer: " + "2 ± " * 3000 + "2 s", C),
    (["2 s"], "Final answer: " + "¹" * 5000 + " s", N),
    (["2 s"], "Final answer: " + r"\frac{1}{" * 3000 + "2 s", N),  # never closed: no number stands alone
    (["2 s"], "Final answer: " + "<s>" * 20000 + "2 s", C),
    (["2 s"], "Final answer: " + "~~" * 20000 + "2 s", N),  # "~~~" opens a code fence
    (["2 s"], "Final answer: 2 s" + "<!--" * 20000, C),
]

TABLE = {
    "right_answers_read_right": RIGHT_ANSWERS_READ_RIGHT,
    "hidden_text": HIDDEN_TEXT,
    "pathological": PATHOLOGICAL,
    "units": UNITS,
    "prefixes": PREFIXES_BINARY_DECIMAL,
    "latex": LATEX,
    "boxed_vs_final": BOXED_VS_FINAL,
    "several_values": SEVERAL_VALUES,
    "wrong_dimension": WRONG_DIMENSION,
    "no_answer": NO_ANSWER,
    "adversarial": ADVERSARIAL,
}
CASES = [
    pytest.param(ref, completion, expected, id=f"{theme}-{i}")
    for theme, rows in TABLE.items()
    for i, (ref, completion, expected) in enumerate(rows)
]


@pytest.mark.parametrize(("reference", "completion", "expected"), CASES)
def test_numeric_grading(reference: list[str], completion: str, expected: Outcome) -> None:
    result = grade_numeric(reference, completion, tolerance=0.02)
    assert result.outcome is expected, result.model_dump()
    assert result.reward == (1.0 if expected is Outcome.correct else 0.0)
    assert len(result.values) == len(reference)


@pytest.mark.parametrize(
    ("reference", "completion", "tolerance", "expected"),
    [
        (["100 s"], "Final answer: 104 s", 0.05, C),
        (["100 s"], "Final answer: 104 s", 0.02, I),
        (["100 s"], "Final answer: 102 s", 0.02, C),
        (["100 s"], "Final answer: 102.1 s", 0.02, I),
        (["100 s"], "Final answer: 110 s", 0.2, C),
    ],
)
def test_tolerance_is_relative_and_explicit(reference, completion, tolerance, expected) -> None:
    assert grade_numeric(reference, completion, tolerance=tolerance).outcome is expected


def test_verdicts_explain_each_value() -> None:
    result = grade_numeric(["3.35 TB/s", "80 GB"], "Final answer: 3.35 TB/s, 90 GB", tolerance=0.02)
    first, second = result.values
    assert first.correct and first.extracted == "3.35 TB/s"
    assert not second.correct and second.extracted == "90 GB"
    assert second.relative_error == pytest.approx(0.125) and second.reason == "outside tolerance"
    assert second.expected_si == 80e9 and second.dimension == "[information]"


@pytest.mark.parametrize(
    "completion",
    ["Final answer: 10^99999999 s", "Final answer: 1e99999 s", "Final answer: " + "9" * 5000 + " s",
     "Final answer: 2^-99999999 s", "Final answer: " + "1," * 3000 + "1 s"],
)
def test_hostile_numbers_are_wrong_not_slow_or_fatal(completion: str) -> None:
    result = grade_numeric(["2 s"], completion, tolerance=0.02)
    assert result.reward == 0.0
    assert result.outcome in (Outcome.incorrect, Outcome.no_answer, Outcome.unit_mismatch)
