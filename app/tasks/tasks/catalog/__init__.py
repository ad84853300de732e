"""All 35 task definitions, in id order."""

from __future__ import annotations

from app.tasks.tasks.catalog import flops, inference, memory, roofline, sharding
from app.tasks.tasks.spec import CATEGORIES, TaskSpec

ALL_SPECS: tuple[TaskSpec, ...] = tuple(
    sorted(
        [*roofline.SPECS, *flops.SPECS, *memory.SPECS, *sharding.SPECS, *inference.SPECS],
        key=lambda s: s.number,
    )
)


def check_catalog(specs: tuple[TaskSpec, ...] = ALL_SPECS) -> None:
    """Ids run sc-000.. without gaps and each category has its planned size."""
    numbers = [s.number for s in specs]
    if numbers != list(range(len(specs))):
        raise ValueError(f"task numbers are not 0..{len(specs) - 1}: {numbers}")
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.category] = counts.get(s.category, 0) + 1
    if counts != CATEGORIES:
        raise ValueError(f"category sizes {counts} differ from {CATEGORIES}")
