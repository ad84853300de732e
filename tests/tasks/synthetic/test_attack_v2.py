"""Attacks on the split ``synthetic-v2`` (the topic families of app/tasks/synthetic/topics.py): an RL
policy that wants reward without the work, and a client that wants the answers.

Found and fixed (each test failed before its fix): ``nvl_allgather`` stated the whole array, so
array / NVLink bandwidth (two of the prompt's numbers) scored 1 on every task (the (G - 1) / G
factor is 1.4% at G = 72, inside the 2% tolerance); ``spec_breakeven`` (a rate in (0, 1)) and
``bwd_dp_batch`` (a key from a few hundred chip/ring/byte combinations) each had one constant
answer that scored above 6% on tasks it was not chosen on; ``trace_comms`` (a collective every
third op) 5.25%; ``nvl_allreduce`` said each rack's gradient was "sharded evenly over its GPUs",
which read literally leaves nothing to sum within a rack (a solver reading only the prompt scored
0); a v2 id with non-ASCII digits ("synthetic-v2/０/1") resolved. The other attacks here found nothing
and stay as tests: a constant, 0, 1, a huge number, a shotgun of values, a range, an expression,
LaTeX, and ids from another layout or malformed ids."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import Counter

import httpx
import pytest

from app.graders.numeric import grade_task
from app.graders.options import GradeOptions
from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.base import Task
from app.tasks.registry import get_bank
from app.tasks.synthetic.bank import SLOTS_V2, family_of_v2, generate_v2
from app.tasks.synthetic.topics import TOPIC_FAMILIES
from tests.support.server import ROOT, running_server

SETTINGS = Settings()
OPTIONS = GradeOptions()
FAMILIES = sorted(TOPIC_FAMILIES)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_CACHE: dict[tuple[str, int, int], list[Task]] = {}


def tasks_of(family: str, n: int, first_seed: int = 0) -> list[Task]:
    """n tasks of one family from distinct seeds, at varying periods of the layout."""
    key = (family, n, first_seed)
    if key not in _CACHE:
        out = []
        for seed in itertools.count(first_seed):
            index = next(i for i in range(len(SLOTS_V2) * 12) if family_of_v2(seed, i) == family)
            out.append(generate_v2(seed, index + 204 * (seed % 5)))
            if len(out) == n:
                break
        _CACHE[key] = out
    return _CACHE[key]


def units(task: Task) -> list[str]:
    return [parse_quantity(g).text.split(" ", 1)[1] if " " in g else "" for g in task.gold]


def reward(task: Task, completion: str) -> float:
    return grade_task(task, completion, OPTIONS, SETTINGS).reward


def answer(task: Task, values: list[float]) -> str:
    """The values in the gold's own units, so only the numbers decide."""
    return "Final answer: " + ", ".join(f"{v:.6g} {u}".strip() for v, u in zip(values, units(task), strict=True))


def keys(task: Task) -> list[float]:
    return [parse_quantity(g).value for g in task.gold]


# ---- a prompt that contains its answer ------------------------------------------------------------

def _candidates(prompt: str) -> dict[tuple[str, int, int], float]:
    """A rule a policy could follow without the work: the i-th number, or the i-th times / over
    the j-th (positions in the prompt)."""
    nums = [float(m.group()) for m in _NUMBER.finditer(prompt)][:40]
    out: dict[tuple[str, int, int], float] = {("n", i, i): a for i, a in enumerate(nums)}
    for (i, a), (j, b) in itertools.permutations(enumerate(nums), 2):
        out["mul", i, j] = a * b
        if b:
            out["div", i, j] = a / b
    return out


# In hindsight, the best of some thousands of rules reaches about 6% by chance on 150 tasks; a
# prompt that gives its answer away scores far above (nvl_allgather's array / bandwidth: 100%).
RULE_AT_MOST = 0.10


@pytest.mark.parametrize("family", FAMILIES)
def test_no_fixed_number_product_or_ratio_of_the_prompt_answers_it(family: str) -> None:
    tasks = tasks_of(family, 150)
    hits: Counter[tuple[str, int, int]] = Counter()
    for t in tasks:
        if len(t.gold) != 1:
            continue  # two keys: one copied number cannot answer both
        gold = keys(t)[0]
        hits.update(rule for rule, v in _candidates(t.prompt).items() if abs(v - gold) <= 0.02 * abs(gold))
    rule, count = hits.most_common(1)[0] if hits else (None, 0)
    if rule is not None:  # confirm through the grader: the rule's value, in the gold's unit
        count = sum(int(reward(t, answer(t, [_candidates(t.prompt).get(rule, 0.0)])) == 1.0) for t in tasks)
    assert count / len(tasks) <= RULE_AT_MOST, (family, rule, count / len(tasks))


# ---- cheap policies ------------------------------------------------------------------------------

CONSTANT_AT_MOST = 0.05


@pytest.mark.parametrize("family", FAMILIES)
def test_a_constant_chosen_on_other_tasks_scores_at_most_5_percent(family: str) -> None:
    """The constant within 2% of the most keys of 400 tasks, answered on 400 tasks of other seeds."""
    train, test = tasks_of(family, 400), tasks_of(family, 400, first_seed=50_000)
    firsts = sorted(keys(t)[0] for t in train)
    best = max(firsts, key=lambda c: sum(abs(x - c) <= 0.02 * abs(x) for x in firsts))
    common = Counter(tuple(keys(t)) for t in train).most_common(1)[0][0]
    for values in ([best] * len(train[0].gold), list(common)):
        score = sum(reward(t, answer(t, values)) for t in test) / len(test)
        assert score <= CONSTANT_AT_MOST, (family, values, score)


def _shotgun(task: Task) -> list[str]:
    unit = units(task)[0]
    powers = ", ".join(f"{10.0 ** e:g} {unit}".strip() for e in range(-9, 19))
    return [
        "Final answer: 0", "Final answer: 1", "Final answer: 1e30", "Final answer: -1",
        f"Final answer: {powers}",
        f"Final answer: between 1e-9 {unit} and 1e18 {unit}",
        f"Final answer: 1e-9 to 1e18 {unit}",
        "Final answer: 0.5 s, 0.5, 0.5 tokens/s, 0.5 bytes, 0.5 FLOPs, 0.5 sequences, 0.5 tokens",
        "Final answer: (1+1)/2",
        "Final answer: inf", "Final answer: nan", "Final answer: 1e309",
        r"\boxed{\frac{1}{2}}", r"Final answer: $x \approx 0.5$",
        "Final answer: <value> <unit>",
        "Final answer: " + " ".join(str(x) for x in range(1, 200)),
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_shotgun_ranges_expressions_and_latex_score_about_zero(family: str) -> None:
    tasks = tasks_of(family, 60)
    for i in range(len(_shotgun(tasks[0]))):
        score = sum(reward(t, _shotgun(t)[i]) for t in tasks) / len(tasks)
        assert score <= CONSTANT_AT_MOST, (family, _shotgun(tasks[0])[i], score)


def test_the_right_answer_in_another_unit_still_grades_and_a_bare_copy_in_a_wrong_unit_does_not() -> None:
    """Unit tricks: the key converted is right; the key's number under a unit of another dimension
    (or a scaled unit without conversion) is not."""
    for family in ("nvl_allgather", "bwd_dp_batch", "spec_breakeven", "flash_kv_reads"):
        for t in tasks_of(family, 20):
            value, unit = keys(t)[0], units(t)[0]
            if unit == "s":
                assert reward(t, f"Final answer: {value * 1e3:.6g} ms") == 1.0, t.id
                assert reward(t, f"Final answer: {value:.6g} ms") == 0.0, t.id
                assert reward(t, f"Final answer: {value:.6g} bytes") == 0.0, t.id
            elif unit == "bytes":
                assert reward(t, f"Final answer: {value / 1e9:.6g} GB") == 1.0, t.id
                assert reward(t, f"Final answer: {value:.6g} s") == 0.0, t.id


# ---- the listing and ids -------------------------------------------------------------------------

_LISTING = (
    "import hashlib, json\n"
    "from app.settings import Settings\n"
    "from app.tasks.registry import get_bank\n"
    "h = hashlib.sha256()\n"
    "for seed in (0, 3, 99):\n"
    "    for t in get_bank('synthetic-v2', Settings()).batch(seed=seed, n=68):\n"
    "        h.update(json.dumps([t.id, t.prompt, list(t.gold)]).encode())\n"
    "print(h.hexdigest())\n"
)


def _digest_here() -> str:
    import hashlib

    h = hashlib.sha256()
    for seed in (0, 3, 99):
        for t in get_bank("synthetic-v2", SETTINGS).batch(seed=seed, n=68):
            h.update(json.dumps([t.id, t.prompt, list(t.gold)]).encode())
    return h.hexdigest()


def test_the_listing_is_the_same_in_fresh_processes() -> None:
    """Two fresh interpreters (random hash seeds) list the same tasks as this one."""
    here = _digest_here()
    for hash_seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", _LISTING], cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"}, check=True)
        assert out.stdout.strip() == here


BAD_IDS = ("synthetic-v3/0/1", "synthetic-v2/0", "synthetic-v2/0/1/2", "synthetic-v2/-1/0",
           "synthetic-v2/0/1e3", "synthetic-v2/0/" + "9" * 19, "synthetic-v2/x/1", "synthetic-v2//1",
           "synthetic-v2/0/1 ", "SYNTHETIC-V2/0/1", "synthetic-v2/０/1")


def test_a_real_server_serves_the_fix_and_refuses_bad_ids_cleanly() -> None:
    """Through HTTP: the listing is the in-process one, a right answer earns 1, the cheap ratio and the
    constant earn 0, and an id of another layout or a malformed one gets a clean 4xx."""
    listed_here = get_bank("synthetic-v2", SETTINGS).batch(seed=5, n=34)
    gather = [t for t in tasks_of("nvl_allgather", 20)]
    with running_server() as url, httpx.Client(base_url=url, timeout=120) as client:
        listed = client.get("/v1/tasks", params={"split": "synthetic-v2", "seed": 5, "n": 34})
        assert listed.status_code == 200
        body = listed.json()
        served = body["tasks"] if isinstance(body, dict) else body
        assert [(t["id"], t["prompt"]) for t in served] == [(t.id, t.prompt) for t in listed_here]
        one = client.get(f"/v1/tasks/{gather[0].id}")
        assert one.status_code == 200 and one.json()["prompt"] == gather[0].prompt
        # a client that wants the answers: neither the listing nor the task carries the key
        for public, task in [(one.json(), gather[0]), *zip(served, listed_here, strict=True)]:
            text = json.dumps(public)
            assert "gold" not in public and all(g.split()[0] not in text for g in task.gold), task.id
        items = []
        for t in gather:
            # the old shortcut, the data the prompt states over the NVLink bandwidth
            data = float(re.search(r"own ([\d.e+]+)-byte shard", t.prompt).group(1))  # type: ignore[union-attr]
            bandwidth = 900e9
            items += [{"task_id": t.id, "completion": "Final answer: " + ", ".join(t.gold)},
                      {"task_id": t.id, "completion": f"Final answer: {data / bandwidth:.6g} s"}]
        rewards = client.post("/v1/rewards", json={"items": items})
        assert rewards.status_code == 200, rewards.text
        got = rewards.json()["rewards"]
        assert got[0::2] == [1.0] * len(gather) and sum(got[1::2]) == 0.0
        for bad in BAD_IDS:
            graded = client.post("/v1/grade", json={"task_id": bad, "completion": "Final answer: 1"})
            assert 400 <= graded.status_code < 500, (bad, graded.status_code)
            assert "Traceback" not in graded.text and len(graded.text) < 2000, bad
            fetched = client.get(f"/v1/tasks/{bad}")
            assert 400 <= fetched.status_code < 500, (bad, fetched.status_code)


# ---- keys recomputed from the prompt's text alone --------------------------------------------------

def _num(pattern: str, prompt: str) -> float:
    m = re.search(pattern, prompt)
    assert m, (pattern, prompt[:300])
    return float(m.group(1))


_F = r"([\d.]+(?:e[+-]?\d+)?)"


def _ring_allreduce(nbytes: float, chips: float, bidi: float) -> float:
    # a ReduceScatter then an AllGather: each moves (n-1)/n of the array through each chip's links
    return 2 * nbytes * (chips - 1) / chips / bidi


def _solve_from_text(family: str, prompt: str) -> tuple[float, ...]:
    """A solver written from the problem statements (the book's ring and AllToAll costs), reading
    only the prompt: no params, no oracle."""
    if family == "nvl_allreduce":
        racks, w = _num(r"^(\d+) GB200", prompt), _num(rf"receives {_F} bytes/s over NVLink", prompt)
        egress = _num(rf"each rack sends {_F} bytes/s", prompt)
        if m := re.search(rf"Every rack holds its own {_F}-byte gradient, sharded evenly over its GPUs", prompt):
            # the old wording: each GPU holds a distinct shard, so only the racks' shards are summed
            return (_ring_allreduce(float(m.group(1)) / 72, racks, egress / 72),)
        grad = _num(rf"Every GPU of every rack holds its own {_F}-byte gradient", prompt)
        inside = _ring_allreduce(grad, 72, w)  # ReduceScatter + AllGather inside the rack
        across = _ring_allreduce(grad / 72, racks, egress / 72)  # each GPU's shard through its NIC
        return (inside + across,)
    if family == "nvl_allgather":
        w, shard = _num(rf"receives {_F} bytes/s", prompt), _num(rf"its own {_F}-byte shard", prompt)
        return (71 * shard / w,)  # each GPU receives the other 71 shards
    if family == "nvl_rack_to_rack":
        nbytes, nic = _num(rf"holds {_F} bytes", prompt), _num(r"its own (\d+) Gbit/s NIC", prompt)
        return (nbytes / (72 * nic * 1e9 / 8),)
    if family in ("bwd_dp", "bwd_fsdp", "bwd_dp_batch"):
        params = _num(rf"^An? {_F}-parameter", prompt)
        chips, bidi = _num(r"(\d+) TPU [\w.]+ chips form", prompt), _num(rf"sends {_F} bytes/s in all", prompt)
        if family == "bwd_fsdp":
            gather = reduce = 2 * params * (chips - 1) / chips / bidi  # AllGather weights, ReduceScatter grads
            return (gather + reduce,)
        grad = _num(r"\((\d) bytes per parameter\)", prompt)
        comm = _ring_allreduce(grad * params, chips, bidi)
        if family == "bwd_dp":
            return (comm,)
        flops = _num(rf"peaks at {_F} bf16", prompt) * _num(r"sustains (\d+)%", prompt) / 100
        return (comm / (4 * params / flops),)
    if family == "bwd_tp":
        layers, d = _num(r"a (\d+)-layer model", prompt), _num(r"D = (\d+)", prompt)
        chips, tokens = _num(r"over (\d+) chips", prompt), _num(r"all (\d+) tokens", prompt)
        bidi = _num(rf"sends {_F} bytes/s in all", prompt)
        return (layers * _ring_allreduce(2 * tokens * d, chips, bidi),)  # dX of the first matmul, per layer
    if family in ("spec_tokens", "spec_speedup", "spec_breakeven"):
        k, p = _num(r"proposes (\d+) tokens", prompt), _num(rf"probability {_F}", prompt)
        tokens = sum(p**i for i in range(int(k) + 1))
        if family == "spec_tokens":
            return (tokens,)
        target = _num(rf"A target pass takes {_F} s", prompt)
        if family == "spec_breakeven":
            return ((tokens - 1) * target / k,)  # k * t_draft + target = tokens * target
        draft = _num(rf"takes {_F} s per drafted token", prompt)
        return (target / ((k * draft + target) / tokens),)
    if family in ("pipe_idle", "pipe_saving", "pipe_micro"):
        stages = _num(r"into (\d+) pipeline stages", prompt)
        if family == "pipe_micro":
            idle = _num(r"at or below (\d+)%", prompt) / 100
            return (float(next(m for m in range(1, 10**6) if (stages - 1) / (m + stages - 1) <= idle + 1e-12)),)
        micro = _num(r"with (\d+) microbatches", prompt)
        if family == "pipe_idle":
            return ((stages - 1) / (micro + stages - 1),)
        fb = _num(rf"forward takes {_F} s", prompt) + _num(rf"its backward {_F} s", prompt)
        return ((stages - 1) * fb, (micro + stages - 1) / micro)
    return _solve_more(family, prompt)


def _decode(prompt: str) -> tuple[float, float, float, float, float, float]:
    return (_num(rf"^An? {_F}-parameter", prompt), _num(r"with (\d)-byte weights", prompt),
            _num(r"on (\d+) [\w .]+ chips \(", prompt), _num(rf"\({_F} FLOP/s", prompt),
            _num(rf"and {_F} bytes/s of HBM", prompt), _num(rf"KV cache holds {_F} bytes", prompt))


def _solve_more(family: str, prompt: str) -> tuple[float, ...]:
    if family.startswith("lt_"):
        params, wb, chips, peak, hbm, kv = _decode(prompt)

        def step(b: int) -> float:
            return max((wb * params + b * kv) / (chips * hbm), 2 * params * b / (chips * peak))
        if family == "lt_point":
            b = int(_num(r"At a batch of (\d+) sequences", prompt))
            return (step(b), b / step(b))
        if family == "lt_knee":
            return (float(next(b for b in range(1, 10**7)
                               if 2 * params * b / peak >= (wb * params + b * kv) / hbm)),)
        cap, target = _num(rf"Each chip has {_F} bytes of HBM", prompt), _num(rf"at most {_F} s", prompt)
        b = 0
        while wb * params + (b + 1) * kv <= chips * cap and step(b + 1) <= target:
            b += 1
        return (float(b),)
    if family == "flash_kv_reads":
        batch, heads = _num(r"batch (\d+)", prompt), _num(r"(\d+) heads", prompt)
        hd, seq = _num(r"dimension (\d+)", prompt), _num(r"sequence length (\d+)", prompt)
        tile = _num(r"tiles of (\d+) rows", prompt)
        return (batch * heads * (seq / tile) * 2 * seq * hd * 2,)  # K and V of the head, per query tile
    if family == "softmax_share":
        hd, soft = _num(r"dimension (\d+)", prompt), _num(r"softmax costs (\d+) FLOPs", prompt)
        return (soft / (soft + 2 * hd + 2 * hd),)
    if family == "norm_share":
        peak, hbm = _num(rf"\({_F} bf16 FLOP/s", prompt), _num(rf"{_F} bytes/s of HBM", prompt)
        t, d = _num(r"activations \[(\d+),", prompt), _num(r"activations \[\d+, (\d+)\]", prompt)
        f, nf = _num(r"weights \[\d+, (\d+)\]", prompt), _num(r"\((\d+) FLOPs per element", prompt)
        norm = max(nf * t * d / peak, 2 * 2 * t * d / hbm)
        mm = max(2 * t * d * f / peak, 2 * (t * d + d * f + t * f) / hbm)
        return (norm / (norm + mm),)
    if family in ("causal_flops", "causal_prefill"):
        layers = _num(r"(\d+) layers", prompt)
        heads, hd = _num(r"(\d+) (?:attention )?heads", prompt), _num(r"dimension (\d+)", prompt)
        seq = _num(r"of (\d+) tokens", prompt)
        attn = layers * heads * 4 * hd * seq * (seq + 1) / 2
        if family == "causal_flops":
            return (_num(r"batch of (\d+) sequences", prompt) * attn,)
        params, peak = _num(rf"^An? {_F}-parameter", prompt), _num(rf"peak {_F} bf16", prompt)
        return ((2 * params * seq + attn) / peak,)
    if family == "causal_tiles":
        seq, tile = _num(r"\[(\d+), \d+\] score", prompt), _num(r"tiles of (\d+) by", prompt)
        rows = int(seq // tile)
        computed = sum(r + 1 for r in range(rows))  # row r of tiles: columns 0..r hold an unmasked score
        return (computed / rows**2, rows * tile * (tile - 1) / 2 / (computed * tile * tile))
    if family in ("moe_dispatch", "moe_cross_node", "moe_ratio"):
        tokens, k = _num(r"holds (\d+) tokens", prompt), _num(r"routed to (\d+) experts", prompt)
        if family == "moe_cross_node":
            nodes, nic = _num(r"over (\d+) nodes", prompt), _num(r"at (\d+) Gbit/s", prompt)
            width = _num(r"of width (\d+)", prompt)
            return (tokens * k * (nodes - 1) / nodes * width * 2 / (nic / 8 * 1e9),)
        gpus, w = _num(r"(\d) [A-Z]\d+ GPUs", prompt), _num(rf"receives {_F} bytes/s over NVLink", prompt)
        width = _num(r"of width (?:D = )?(\d+)", prompt)
        one_way = tokens * k * (gpus - 1) / gpus * width * 2 / w
        if family == "moe_dispatch":
            return (one_way,)
        f, peak = _num(r"F = (\d+)", prompt), _num(rf"\({_F} bf16 FLOP/s", prompt)
        return (tokens * k * 2 * 3 * width * f / peak / (2 * one_way),)
    events = [json.loads(line) for line in prompt.splitlines() if line.startswith("{")]
    if family == "trace_comms":
        busy = sum(e["dur"] for e in events if e["name"].split(".")[0] in
                   ("all-gather", "reduce-scatter", "all-reduce", "all-to-all"))
        return (busy / (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)),)
    if family == "trace_mfu":
        starts = sorted(e["ts"] for e in events)
        step_time = (starts[-1] - starts[0]) / (len(starts) - 1) / 1e6
        params, chips = _num(rf"^An? {_F}-parameter", prompt), _num(r"on (\d+) TPU", prompt)
        peak, tokens = _num(rf"\({_F} bf16 FLOP/s each", prompt), _num(r"with (\d+) tokens per step", prompt)
        return (6 * params * tokens / step_time / (chips * peak),)
    if family == "trace_dot":
        m = re.search(r"bf16\[(\d+),(\d+)\]\S* dot\(bf16\[(\d+),(\d+)\]\S* %p0, bf16\[(\d+),(\d+)\]", prompt)
        assert m
        rows, cols, _, inner, inner2, _ = (int(x) for x in m.groups())
        assert inner == inner2
        us, peak = _num(rf"taking {_F} microseconds", prompt), _num(rf"\({_F} bf16 FLOP/s at peak", prompt)
        return (2 * rows * inner * cols / (us / 1e6) / peak,)
    raise KeyError(family)


TEXT_SOLVED = FAMILIES


@pytest.mark.parametrize("family", TEXT_SOLVED)
def test_a_solver_reading_only_the_prompt_earns_the_key(family: str) -> None:
    """nvl_allreduce said "every rack holds its own gradient, sharded evenly over its GPUs": read so,
    nothing is summed within a rack, and the careful answer (the cross-rack phase) scored 0."""
    for t in tasks_of(family, 100):
        values = _solve_from_text(family, t.prompt)
        assert reward(t, answer(t, list(values))) == 1.0, (t.id, values, t.gold)


# ---- the exam items of the nine topics (issue 33) -----------------------------------------------------

def _exam_numeric() -> list[Task]:
    bank = get_bank("exam", SETTINGS)
    return [t for t in bank.batch(seed=0, n=bank.size() or 0) if t.grading == "numeric"]


def test_exam_nvl72_allgather_is_not_array_over_egress() -> None:
    """exam/gpus/024 stated the whole array and "including the (N - 1)/N factor": the array over
    the egress (two of its numbers) was 1.4% from the key, and the prompt named the factor."""
    task = get_bank("exam", SETTINGS).get("exam/gpus/024")
    assert "(N - 1)/N" not in task.prompt
    nums = [float(m.group()) for m in _NUMBER.finditer(task.prompt)]
    for a, b in itertools.permutations(nums, 2):
        if b:
            assert reward(task, f"Final answer: {a / b:.6g} s") == 0.0, (a, b)
    assert reward(task, "Final answer: " + ", ".join(task.gold)) == 1.0


def test_no_exam_numeric_key_is_one_of_its_prompts_numbers() -> None:
    copied = []
    for t in _exam_numeric():
        if len(t.gold) == 1:
            unit = units(t)[0]
            if any(reward(t, f"Final answer: {float(m.group()):.6g} {unit}".strip()) == 1.0
                   for m in _NUMBER.finditer(t.prompt)):
                copied.append(t.id)
    assert copied == []


def test_exam_pipeline_item_states_no_hop_formula() -> None:
    prompt = get_bank("exam", SETTINGS).get("exam/gpus/008").prompt
    assert "microbatches + stages" not in prompt and "hops" not in prompt
