"""The synthetic generator: deterministic across processes, interleaved families, and every
family's target recomputed here by an independent formula from the parameters it states."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from app.graders.numeric import grade_numeric
from app.quantities import parse_quantity
from app.tasks.base import UnknownTask
from app.tasks.synthetic.bank import SyntheticBank, generate
from app.tasks.synthetic.families import FAMILIES

BANK = SyntheticBank()


def _expected(family: str, p: dict) -> list[float]:
    """The book's formulas, written out again independently of app/tasks/synthetic/families.py."""
    if family == "matmul_cost":
        b, d, f, s = p["B"], p["D"], p["F"], p["bytes_per_element"]
        return [2.0 * b * d * f, float(s) * (b * d + d * f + b * f)]
    if family == "arithmetic_intensity":
        b, d, f, s = p["B"], p["D"], p["F"], p["bytes_per_element"]
        return [(2.0 * b * d * f) / (s * (b * d + d * f + b * f))]
    if family == "critical_batch":
        return [p["peak_flops"] / p["hbm_bandwidth"] * p["weight_bytes"] / 2]
    if family == "roofline_time":
        parts = [p["flops"] / p["peak_flops"], p["hbm_bytes"] / p["hbm_bandwidth"]]
        if "ici_bytes" in p:
            parts.append(p["ici_bytes"] / p["ici_bandwidth"])
        return [max(parts) if p["overlap"] else math.fsum(parts)]
    if family == "kv_cache":
        return [2.0 * p["layers"] * p["batch"] * p["seq"] * p["kv_heads"] * p["head_dim"] * p["bytes_per_element"]]
    if family == "param_count":
        attention = p["D"] * p["N"] * p["H"] * 2 + p["D"] * p["K"] * p["H"] * 2  # Q and O; K and V
        mlp = 3 * p["D"] * p["F"]
        embeddings = p["V"] * p["D"] * (1 if p["tied"] else 2)
        return [float(p["L"] * (attention + mlp) + embeddings)]
    if family == "training_flops":
        flops = 6 * p["params"] * p["tokens"]
        return [flops, flops / p["chips"] / p["peak_flops"] / p["mfu"]]
    if family == "inference_flops":
        return [2.0 * p["params"] * p["batch"] * p["generated"]]
    if family == "collective_time":
        bw = p["ici_bidi"] if p["wraparound"] else p["ici_oneway"]
        one_pass = p["array_bytes"] / bw * (p["n"] - 1) / p["n"]
        factor = {"AllGather": 1, "ReduceScatter": 1, "AllReduce": 2}.get(p["op"])
        return [one_pass * factor if factor else p["array_bytes"] / bw / 4]
    if family == "fsdp_vs_tp":
        s, w = p["bytes_per_element"], p["ici_bidi"]
        return [2 * s * p["D"] * p["F"] / p["Y"] / w, 2 * s * p["B"] * p["D"] / p["X"] / w]
    if family == "decode_step_time":
        return [(p["params"] * p["weight_bytes"] + p["kv_bytes"]) / p["hbm_bandwidth"] / p["chips"]]
    if family == "training_memory":
        weights, grads, adam, master = 2, 2, 4 + 4, 4 if p["master_copy"] else 0
        total = p["params"] * (weights + grads + adam + master)
        return [total, float(math.ceil(total / p["hbm_bytes"]))]
    raise AssertionError(f"no independent formula for {family}")


def _stated(value: object) -> list[str]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | str):
        return [str(value)]
    return [f"{value:.6g}", f"{value:.0%}"]


SAMPLE = [generate(seed, index) for seed in (0, 3, 17) for index in range(60)]


def test_there_are_at_least_eleven_families() -> None:
    assert len(FAMILIES) >= 11


@pytest.mark.parametrize("task", SAMPLE, ids=lambda t: t.id)
def test_target_matches_independent_formula(task) -> None:
    expected = _expected(task.meta["family"], task.meta["params"])
    gold = [parse_quantity(g).value for g in task.gold]
    assert gold == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("task", SAMPLE[:36], ids=lambda t: t.id)
def test_prompt_states_every_parameter(task) -> None:
    for name, value in task.meta["params"].items():
        if isinstance(value, bool) or value == 0:
            continue
        assert any(s in task.prompt for s in _stated(value)), (name, value)
    assert "Final answer" in task.prompt


@pytest.mark.parametrize("task", SAMPLE[:24], ids=lambda t: t.id)
def test_gold_written_back_in_other_units_scores_one(task) -> None:
    parts = []
    for g in task.gold:
        q = parse_quantity(g)
        unit = {"[information]": "GiB", "[time]": "ms", "[operation]": "TFLOPs"}.get(q.dimension)
        if unit is None:
            parts.append(g)
            continue
        scale = {"GiB": 2**30, "ms": 1e-3, "TFLOPs": 1e12}[unit]
        parts.append(f"{q.value / scale:.6g} {unit}")
    good = grade_numeric(task.gold, "Work...\nFinal answer: " + ", ".join(parts), tolerance=0.02)
    assert good.reward == 1.0, good.model_dump()
    first = parse_quantity(task.gold[0])
    off = [f"{first.value * 1.1!r} {task.gold[0].split(' ', 1)[1]}", *task.gold[1:]]
    assert grade_numeric(task.gold, "Final answer: " + ", ".join(off), tolerance=0.02).reward == 0.0


def test_same_seed_same_tasks_and_different_seed_differs() -> None:
    a = [t.public() for t in BANK.batch(seed=5, n=30)]
    b = [t.public() for t in BANK.batch(seed=5, n=30)]
    c = [t.public() for t in BANK.batch(seed=6, n=30)]
    assert a == b
    assert [t["prompt"] for t in a] != [t["prompt"] for t in c]


@pytest.mark.slow
def test_same_tasks_in_another_process() -> None:
    code = (
        "import json;from app.tasks.synthetic.bank import SyntheticBank;"
        "print(json.dumps([[t.id, t.prompt, list(t.gold)] for t in SyntheticBank().batch(seed=11, n=25)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}, cwd=".")
    here = [[t.id, t.prompt, list(t.gold)] for t in BANK.batch(seed=11, n=25)]
    assert json.loads(out.stdout) == here


def test_id_regenerates_the_task() -> None:
    for task in BANK.batch(seed=9, n=24, offset=1000):
        again = BANK.get(task.id)
        assert (again.prompt, again.gold) == (task.prompt, task.gold)


def test_short_prefix_spans_many_families() -> None:
    for seed in range(5):
        families = {t.meta["family"] for t in BANK.batch(seed=seed, n=8)}
        assert len(families) == 8


@pytest.mark.parametrize("n", [1, 2, 7, 13, 100])
def test_any_positive_batch_size(n: int) -> None:
    batch = BANK.batch(seed=1, n=n, offset=3)
    assert [t.id for t in batch] == [f"synthetic/1/{i}" for i in range(3, 3 + n)]


def test_chapter_filter_keeps_only_that_chapter() -> None:
    batch = BANK.batch(seed=2, n=10, chapters=["sharding"])
    assert len(batch) == 10 and {t.chapter for t in batch} == {"sharding"}
    assert BANK.batch(seed=2, n=5, chapters=["no-such-chapter"]) == []


@pytest.mark.parametrize("bad", ["synthetic/x/1", "synthetic/1", "synthetic/-1/2", "synthetic/1/2/3", "book/1/2"])
def test_malformed_ids_are_unknown(bad: str) -> None:
    with pytest.raises(UnknownTask):
        BANK.get(bad)


def test_public_view_hides_gold() -> None:
    view = json.dumps(generate(4, 4).public())
    for g in generate(4, 4).gold:
        assert g.split(" ")[0] not in view


# ---- interleave: every window of eight spans the kinds of work ---------------------------------

KIND = {  # written out here, independently of the bank's slots
    "matmul_cost": "roofline", "arithmetic_intensity": "roofline", "critical_batch": "roofline",
    "roofline_time": "roofline", "kv_cache": "kv-cache", "param_count": "transformer",
    "training_flops": "transformer", "inference_flops": "transformer", "collective_time": "collective",
    "fsdp_vs_tp": "fsdp-tp", "decode_step_time": "inference", "training_memory": "training",
}
REQUIRED_KINDS = {"roofline", "kv-cache", "transformer", "collective", "fsdp-tp"}


def test_every_family_has_a_kind() -> None:
    assert set(KIND) == set(FAMILIES)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7, 11, 12345, 10**17])
def test_every_window_of_eight_spans_roofline_kv_transformer_collective_and_fsdp_tp(seed: int) -> None:
    tasks = BANK.batch(seed=seed, n=40)
    for start in range(len(tasks) - 7):
        kinds = {KIND[t.meta["family"]] for t in tasks[start : start + 8]}
        assert kinds >= REQUIRED_KINDS, (seed, start, kinds)


def test_first_eight_of_seed_zero_hold_a_collective_and_an_fsdp_tp_task() -> None:
    families = [t.meta["family"] for t in BANK.batch(seed=0, n=8)]
    assert "collective_time" in families and "fsdp_vs_tp" in families
    assert [t.id for t in BANK.batch(seed=0, n=8)] == [f"synthetic/0/{i}" for i in range(8)]


def test_every_family_still_appears_and_one_per_family_finds_them_all() -> None:
    seen = {t.meta["family"] for t in BANK.batch(seed=5, n=48)}
    assert seen == set(FAMILIES)
    sample = BANK.one_per_family()
    assert sorted(t.meta["family"] for t in sample) == sorted(FAMILIES)


def test_fsdp_vs_tp_states_the_formula_its_key_uses() -> None:
    task = next(t for t in BANK.batch(seed=0, n=64) if t.meta["family"] == "fsdp_vs_tp")
    assert "T_fsdp = 4·D·F / (Y·W)" in task.prompt and "T_tp = 4·B·D / (X·W)" in task.prompt
    assert "(N-1)/N" in task.prompt  # says the ring factor is left out, unlike collective_time
    p = task.meta["params"]
    stated = [4 * p["D"] * p["F"] / (p["Y"] * p["ici_bidi"]), 4 * p["B"] * p["D"] / (p["X"] * p["ici_bidi"])]
    assert [parse_quantity(g).value for g in task.gold] == pytest.approx(stated, rel=1e-12)
