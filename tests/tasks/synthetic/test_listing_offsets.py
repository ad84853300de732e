"""The chapter-filtered listing finds its offset by arithmetic: the same tasks as walking every
index (the reference below), and the same small work at an offset of 2**62 as at 0."""

from __future__ import annotations

import pytest

from app.tasks.synthetic import bank
from app.tasks.synthetic.bank import _FAMILY_CHAPTERS, MAX_INDEX, PERIOD, SyntheticBank, family_of

BANK = SyntheticBank()
CHAPTERS = sorted(set(_FAMILY_CHAPTERS.values()))


def walked(seed: int, chapters: list[str], offset: int, n: int) -> list[str]:
    """The reference: walk indices one by one, counting matching tasks only."""
    wanted = {f for f, c in _FAMILY_CHAPTERS.items() if c in chapters}
    ids, skipped, index = [], 0, 0
    while len(ids) < n:
        if family_of(seed, index) in wanted:
            if skipped >= offset:
                ids.append(f"synthetic/{seed}/{index}")
            else:
                skipped += 1
        index += 1
    return ids


@pytest.mark.parametrize("chapters", [[c] for c in CHAPTERS] + [CHAPTERS[:2], CHAPTERS])
@pytest.mark.parametrize(("seed", "offset", "n"), [(0, 0, 5), (3, 7, 11), (11, 100, 30), (2**40, 513, 9)])
def test_same_tasks_as_walking(chapters: list[str], seed: int, offset: int, n: int) -> None:
    got = [t.id for t in BANK.batch(seed=seed, n=n, offset=offset, chapters=chapters)]
    assert got == walked(seed, chapters, offset, n)


@pytest.mark.parametrize("chapters", [None, [CHAPTERS[0]]])
def test_huge_offset_is_as_cheap_as_a_small_one(chapters: list[str] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    def counted(seed: int, index: int) -> str:
        nonlocal calls
        calls += 1
        return family_of(seed, index)

    monkeypatch.setattr(bank, "family_of", counted)
    tasks = BANK.batch(seed=1, n=4, offset=2**62, chapters=chapters)
    # no index past what an id can name: a listing never hands out an id that does not resolve
    assert all(int(t.id.rsplit("/", 1)[1]) <= MAX_INDEX for t in tasks)
    for task in tasks:
        assert BANK.get(task.id).prompt == task.prompt
    # one period of family look-ups to find the offset, then one per task (generate's own):
    # the walk this replaces made 2**62 of them and never returned
    assert calls <= PERIOD + 2 * len(tasks)


def test_offsets_near_the_last_index_stop_there() -> None:
    tasks = BANK.batch(seed=0, n=10, offset=MAX_INDEX - 2)
    assert [t.id for t in tasks] == [f"synthetic/0/{i}" for i in range(MAX_INDEX - 2, MAX_INDEX + 1)]
