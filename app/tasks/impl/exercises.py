"""Every implementation exercise, by name."""

from __future__ import annotations

from app.tasks.impl import ex_collectives, ex_jax, ex_roofline, ex_training
from app.tasks.impl.spec import Exercise

ALL: list[Exercise] = [
    *ex_roofline.EXERCISES,
    *ex_collectives.EXERCISES,
    *ex_training.EXERCISES,
    *ex_jax.EXERCISES,
]
BY_NAME: dict[str, Exercise] = {e.name: e for e in ALL}

