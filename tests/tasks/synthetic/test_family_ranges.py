"""Generated questions stay questions someone would ask and the tolerance can grade: a training
run finishes within its drawn number of days (never decades), and a chip count stays below 50,
where 2% still tells rounding up from rounding down."""

from __future__ import annotations

from app.quantities import parse_quantity
from app.tasks.synthetic.bank import generate

SAMPLE = [generate(seed, index) for seed in range(40) for index in range(24)]


def _by_family(name: str):
    tasks = [t for t in SAMPLE if t.meta["family"] == name]
    assert len(tasks) >= 20
    return tasks


def test_training_runs_last_days_not_decades() -> None:
    for task in _by_family("training_flops"):
        seconds = parse_quantity(task.gold[1]).value
        assert 0 < seconds <= 90 * 86400, (task.id, seconds)
        assert task.meta["params"]["chips"] >= 8


def test_chip_counts_stay_where_two_percent_tells_ceil_from_floor() -> None:
    for task in _by_family("training_memory"):
        chips = parse_quantity(task.gold[1]).value
        assert 1 <= chips <= 48 and chips == int(chips), (task.id, chips)
        # the next count down is outside the 2% tolerance of the key
        assert chips == 1 or (chips - (chips - 1)) / chips > 0.02


def test_the_alltoall_prompt_names_its_bandwidth() -> None:
    alltoall = [t for t in _by_family("collective_time") if t.meta["params"]["op"] == "AllToAll"]
    assert alltoall and all("both-ways link bandwidth" in t.prompt for t in alltoall)
