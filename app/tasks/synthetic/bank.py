"""Synthetic tasks by id: ``synthetic/<seed>/<index>`` (layout 1) and ``synthetic-v2/<seed>/<index>``
(layout 2, the split ``synthetic-v2``). Layout 1 is frozen: RL runs list a seed's tasks by index,
so adding a family to its slots would move every later task. New families go into layout 2,
which keeps layout 1's eight slots and appends one slot per topic of app/tasks/synthetic/topics.py.

Families are grouped into eight slots by
the kind of work they teach (roofline, KV cache, transformer accounting, collectives, FSDP
against tensor parallelism, ...). Position p = seed + index takes slot p mod 8, and within the
slot the family rotates with p div 8. So any eight consecutive tasks, in particular the first
eight of every seed, span every slot: roofline, KV cache, transformer, collective and FSDP/TP
work all appear in every window of eight."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from app.tasks.base import Task, UnknownTask
from app.tasks.difficulty import difficulty_tags
from app.tasks.synthetic.families import FAMILIES, Generated
from app.tasks.synthetic.rng import Draws
from app.tasks.synthetic.topics import ORACLES, TOPIC_FAMILIES, TOPICS

if TYPE_CHECKING:
    from app.settings import Settings

SPLIT = "synthetic"
# The interleave: one slot per kind of work; every family appears in exactly one slot.
SLOTS: tuple[tuple[str, ...], ...] = (
    ("matmul_cost", "arithmetic_intensity"),  # roofline
    ("kv_cache",),  # KV cache
    ("param_count", "training_flops", "inference_flops"),  # transformer accounting
    ("collective_time",),  # collectives
    ("fsdp_vs_tp",),  # FSDP against tensor parallelism
    ("critical_batch", "roofline_time"),  # roofline
    ("decode_step_time",),  # inference
    ("training_memory",),  # training memory
)
_FAMILY_NAMES = tuple(FAMILIES)
# An id is exactly as a listing writes it: ASCII digits ("\d" also took "٣" and "３"), no leading zero;
# "synthetic/003/0" would grade as synthetic/3/0 under an id no listing ever handed out.
_NUMBER = r"(0|[1-9][0-9]{0,17})"
_ID = re.compile(rf"synthetic/{_NUMBER}/{_NUMBER}")
# Ids carry at most 18 digits per number: a listing never hands out an index it could not resolve.
MAX_INDEX = 10**18 - 1
# family_of repeats with this period of positions (eight slots, each rotating its families).
PERIOD = len(SLOTS) * math.lcm(*(len(slot) for slot in SLOTS))
if sorted(f for slot in SLOTS for f in slot) != sorted(_FAMILY_NAMES):
    raise RuntimeError("every synthetic family must sit in exactly one slot")


def family_of(seed: int, index: int) -> str:
    position = seed + index
    slot = SLOTS[position % len(SLOTS)]
    return slot[(position // len(SLOTS)) % len(slot)]


@lru_cache(maxsize=8192)
def cached(seed: int, index: int) -> Task:
    """RL runs grade several completions per task: regenerate each task once, not per grade."""
    return generate(seed, index)


def generate(seed: int, index: int) -> Task:
    family = family_of(seed, index)
    g: Generated = FAMILIES[family](Draws(seed, index))
    return Task(
        id=f"{SPLIT}/{seed}/{index}",
        split=SPLIT,
        prompt=g.prompt,
        grading="numeric",
        gold=g.gold,
        chapter=g.chapter,
        tags=g.tags,
        meta={"family": family, "params": g.params},
    )


class SyntheticBank:
    name = SPLIT
    description = "Seeded generator of numeric scaling problems; unlimited and regenerable from the id"

    def get(self, task_id: str) -> Task:
        m = _ID.fullmatch(task_id)
        if not m:
            raise UnknownTask(task_id)
        return cached(int(m.group(1)), int(m.group(2)))

    def _generate(self, seed: int, index: int) -> Task:
        return generate(seed, index)

    def _family_of(self, seed: int, index: int) -> str:
        return family_of(seed, index)

    @staticmethod
    def _chapter_of(family: str) -> str:
        return _FAMILY_CHAPTERS.get(family) or _TOPIC_CHAPTERS[family]

    def batch(self, *, seed: int, n: int, offset: int = 0, chapters: Sequence[str] | None = None) -> list[Task]:
        """Work in proportion to n, whatever the offset: the family pattern is periodic, so the
        offset-th matching index is found by arithmetic, not by walking every index before it."""
        if not chapters:
            indices: Sequence[int] = range(offset, min(offset + n, MAX_INDEX + 1))
        else:
            wanted = {name for name in self._families if self._chapter_of(name) in set(chapters)}
            indices = matching_indices(seed, wanted, offset, n, self._family_of, self._period)
        return [self._generate(seed, i) for i in indices]

    def size(self) -> int | None:
        return None

    def one_per_family(self, seed: int = 0) -> list[Task]:
        """The first task of each family in seed's order (what the coverage map counts)."""
        first: dict[str, int] = {}
        index = 0
        while len(first) < len(self._families):
            first.setdefault(self._family_of(seed, index), index)
            index += 1
        return [self._generate(seed, i) for i in sorted(first.values())]

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "size": None,
            "grading": {"numeric": None},
            "families": list(self._families),
            "chapters": sorted({self._chapter_of(f) for f in self._families}),
        }

    _families: tuple[str, ...] = _FAMILY_NAMES
    _period = PERIOD


# Each family always lands in one chapter; learn it once from a sample.
_FAMILY_CHAPTERS: dict[str, str] = {name: fn(Draws(0, 0)).chapter for name, fn in FAMILIES.items()}
_TOPIC_CHAPTERS: dict[str, str] = {name: fn(Draws(0, 0)).chapter for name, fn in TOPIC_FAMILIES.items()}


def matching_indices(seed: int, wanted: set[str], offset: int, n: int,
                     family: Callable[[int, int], str] = family_of, period: int = PERIOD) -> list[int]:
    """Indices of the offset-th to (offset + n - 1)-th tasks of the wanted families, in order
    (offset counts matching tasks only), none beyond MAX_INDEX."""
    # Matching indices within one period, for this seed; each later period repeats them shifted.
    in_period = [i for i in range(period) if family(seed, i) in wanted]
    if not in_period:
        return []
    periods, rank = divmod(offset, len(in_period))
    found: list[int] = []
    while len(found) < n:
        index = periods * period + in_period[rank]
        if index > MAX_INDEX:
            break
        found.append(index)
        rank += 1
        if rank == len(in_period):
            periods, rank = periods + 1, 0
    return found


def load_bank(settings: Settings) -> SyntheticBank:
    return SyntheticBank()


# ---- layout 2: layout 1's slots, then one slot per topic ------------------------------------

SPLIT_V2 = "synthetic-v2"
SLOTS_V2: tuple[tuple[str, ...], ...] = SLOTS + tuple(tuple(f.__name__ for f in fs) for fs in TOPICS.values())
FAMILIES_V2: dict[str, Callable[[Draws], Generated]] = FAMILIES | TOPIC_FAMILIES
# As _ID: ASCII digits (\d also takes "０" or "٣", which int() reads) and no leading zero, so a task
# has one id.
_ID_V2 = re.compile(rf"synthetic-v2/{_NUMBER}/{_NUMBER}")
PERIOD_V2 = len(SLOTS_V2) * math.lcm(*(len(slot) for slot in SLOTS_V2))
if sorted(f for slot in SLOTS_V2 for f in slot) != sorted(FAMILIES_V2):
    raise RuntimeError("every layout-2 family must sit in exactly one slot")


def family_of_v2(seed: int, index: int) -> str:
    position = seed + index
    slot = SLOTS_V2[position % len(SLOTS_V2)]
    return slot[(position // len(SLOTS_V2)) % len(slot)]


def generate_v2(seed: int, index: int) -> Task:
    family = family_of_v2(seed, index)
    g: Generated = FAMILIES_V2[family](Draws(seed, index))
    # the topic families' oracles are separate functions: their steps are the difficulty tag
    rated = _RATED.get(family, {})
    return Task(
        id=f"{SPLIT_V2}/{seed}/{index}",
        split=SPLIT_V2,
        prompt=g.prompt,
        grading="numeric",
        gold=g.gold,
        chapter=g.chapter,
        tags=g.tags,
        meta={"family": family, "params": g.params, **rated},
    )


_RATED: dict[str, dict[str, int | str]] = {name: difficulty_tags(fn) for name, fn in ORACLES.items()}


@lru_cache(maxsize=8192)
def cached_v2(seed: int, index: int) -> Task:
    return generate_v2(seed, index)


class SyntheticBankV2(SyntheticBank):
    name = SPLIT_V2
    description = ("Seeded generator of numeric scaling problems, layout 2: layout 1's families and one "
                   "slot per topic added since (speculative sampling, FlashAttention, causal masking, "
                   "latency against throughput, MoE AllToAll, zero-bubble pipelines, GB200 NVL72, "
                   "backward-pass communication, profiler traces)")
    _families = tuple(FAMILIES_V2)
    _period = PERIOD_V2

    def get(self, task_id: str) -> Task:
        m = _ID_V2.fullmatch(task_id)
        if not m:
            raise UnknownTask(task_id)
        return cached_v2(int(m.group(1)), int(m.group(2)))

    def _generate(self, seed: int, index: int) -> Task:
        return generate_v2(seed, index)

    def _family_of(self, seed: int, index: int) -> str:
        return family_of_v2(seed, index)

