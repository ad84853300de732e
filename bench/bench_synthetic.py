"""Synthetic tasks generated per second in-process (target >= 50,000/s; layout 1, and layout 2
beside it), with the ratio against a baseline measured in the same run: formatting one fixed
prompt template per task, the least any generator of text tasks must do."""

from __future__ import annotations

from app.tasks.synthetic.bank import generate, generate_v2
from bench.timing import per_call_seconds


def main(smoke: bool) -> None:
    n = 2_000 if smoke else 50_000
    counter = iter(range(10**12))

    def ours() -> None:
        generate(7, next(counter))

    def ours_v2() -> None:
        generate_v2(7, next(counter))

    def baseline() -> None:
        i = next(counter)
        f"A matmul with B = {i}, D = {i * 2}, F = {i * 3} in bf16. Final answer: {2 * i * i:.6g} FLOPs"

    t_ours = per_call_seconds(ours, repeats=n)
    t_v2 = per_call_seconds(ours_v2, repeats=n)
    t_base = per_call_seconds(baseline, repeats=n)
    print(f"   synthetic tasks: {1 / t_ours:,.0f} per second (target >= 50,000)")
    print(f"   ratio (our cost / one template format): {t_ours / t_base:.1f}x")
    # layout 2 (synthetic-v2): the same families plus the topic families, whose trace prompts are longer
    print(f"   synthetic-v2 tasks: {1 / t_v2:,.0f} per second; ratio to layout 1: {t_v2 / t_ours:.2f}x")
