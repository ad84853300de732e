"""Numeric grading per completion: ours (unit-aware) against math_verify's verify(parse(...)) on
the same completions, measured in the same run. Target: ours at least 5x faster."""

from __future__ import annotations

from app.graders.numeric import grade_numeric
from bench.timing import per_call_seconds

COMPLETIONS = [
    ("3.35 TB/s", "Reasoning... so the bandwidth is large.\nFinal answer: 3350 GB/s"),
    ("1.5 ms", "We divide FLOPs by peak.\nFinal answer: $1.5 \\times 10^{-3}$ s"),
    ("80 GB", "The cache holds keys and values. \\boxed{80 GB}"),
    ("6.3e23 FLOPs", "Using 6ND: Final answer: 6.3e23 FLOPs"),
    ("683 FLOPs/byte", "Intensity is 2BDF over bytes. Final answer: 682.67 FLOPs/byte"),
    ("256 chips", "Round up.\nFinal answer: 256 chips"),
]


def main(smoke: bool) -> None:
    from math_verify import parse, verify  # the comparison baseline: only in the test extra

    repeats = 20 if smoke else 400
    pairs = [(gold, text) for gold, text in COMPLETIONS]

    def ours() -> None:
        for gold, text in pairs:
            grade_numeric([gold], text, tolerance=0.02)

    def theirs() -> None:
        for gold, text in pairs:
            verify(parse(gold), parse(text))

    ours()
    theirs()  # warm caches on both sides
    t_ours = per_call_seconds(ours, repeats=repeats) / len(pairs)
    t_theirs = per_call_seconds(theirs, repeats=max(2, repeats // 10)) / len(pairs)
    print(f"   ours: {t_ours * 1e6:.1f} us/completion   math_verify: {t_theirs * 1e6:.1f} us/completion")
    print(f"   ratio (math_verify / ours): {t_theirs / t_ours:.1f}x   target >= 5x")
