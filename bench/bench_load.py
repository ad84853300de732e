"""Load on the distributed setup: a real Redis, the API, RQ workers. 64 concurrent clients post
a mix of numeric (inline) and impl (queued, waited for) gradings; printed: throughput, p50/p99
per kind, errors (target: zero). Then impl throughput in hidden cases per second per core, in the
same run, for workers arranged on this machine's cores: one worker with one lane (one job at a
time, as before lanes), one worker with a lane per core (the default), two one-lane workers
sharing the cores, and two workers pinned to a core each; printed: the ratio of one worker with
lanes to two one-lane workers (target: at least 1, one worker uses all the cores it is given)
and to one lane.

Then hostile load: the parent's CPU to read a result of the maximum size and judge it (target
under 100 ms), and, on one embedded service, an honest impl grade's latency and the numeric p99
while four hostile cases (forged result frames: huge, 2-byte characters, deep, wide) are in
flight (targets: within 2x the solo latency, p99 under 50 ms), printed as ratios."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import statistics
import threading
import time
from dataclasses import dataclass

import httpx

from app.graders.impl_verdict import assess
from app.sandbox.executor import CaseRun
from app.sandbox.launch import Child, read_messages
from app.settings import SandboxSettings
from app.tasks.impl import reference
from app.tasks.impl.exercises import BY_NAME
from app.tasks.impl.spec import Case
from app.tasks.synthetic.bank import SyntheticBank
from bench.loadgen import request_bytes, run_load
from bench.timing import percentile
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

EXERCISE = "critical_batch_size"
ENV = {"SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "2", "SCALING_GRADER_QUEUE__DEFAULT_WAIT": "120"}


def _impl_completion() -> str:
    return "```python\n" + inspect.getsource(getattr(reference, EXERCISE)) + "\n```"


def _numeric_bodies() -> list[dict]:
    return [{"task_id": t.id, "completion": "Final answer: " + ", ".join(t.gold)}
            for t in SyntheticBank().batch(seed=4, n=48)]


@dataclass(frozen=True)
class Arrangement:
    """Worker processes on this machine: lanes (jobs at once) and pinned CPUs (None: all) of each."""

    label: str
    workers: tuple[tuple[int, frozenset[int] | None], ...]

    def cores(self, machine: frozenset[int]) -> int:
        """The cores the arrangement runs on in all (all its workers together)."""
        used: set[int] = set()
        for _, cpus in self.workers:
            used |= cpus if cpus is not None else machine
        return len(used)


def _arrangements(machine: frozenset[int]) -> list[Arrangement]:
    cores = len(machine)
    out = [
        Arrangement(f"1 worker, 1 lane, {cores} cores (before lanes)", ((1, None),)),
        Arrangement(f"1 worker, {cores} lanes (auto), {cores} cores", ((0, None),)),
        Arrangement(f"2 workers, 1 lane each, sharing {cores} cores", ((1, None), (1, None))),
    ]
    if cores >= 2:  # one worker pinned to each core: lanes auto gives each one lane
        pinned = tuple((0, frozenset({cpu})) for cpu in sorted(machine)[:2])
        out.append(Arrangement("2 workers, each pinned to 1 core (lanes auto: 1)", pinned))
    return out


def _grade_all(client: httpx.Client, jobs: int) -> None:
    ids = [client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": _impl_completion(),
                                          "wait": 0}).json()["job_id"] for _ in range(jobs)]
    for job_id in ids:
        body = client.get(f"/v1/jobs/{job_id}", params={"wait": 300}).json()
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body


def _impl_throughput(url: str, redis_url: str, arrangement: Arrangement, jobs: int, tag: str) -> float:
    """Impl grades per second through the API with the arrangement's workers serving the queue."""
    procs = []
    for i, (lanes, cpus) in enumerate(arrangement.workers):
        pin = (lambda cpus=cpus: os.sched_setaffinity(0, cpus)) if cpus is not None else None
        procs.append(start_worker(redis_url, f"bench-{tag}-{i}", ENV, jobs=lanes, preexec_fn=pin))
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            _grade_all(client, 4 * len(procs))  # warm every worker (pool start, imports) before timing
            start = time.perf_counter()
            _grade_all(client, jobs)
            return jobs / (time.perf_counter() - start)
    finally:
        for p in procs:
            stop_worker(p)


def impl_scaling(url: str, redis_url: str, jobs: int, rounds: int) -> None:
    """Impl cases per second per core for each arrangement of workers on this machine's cores.
    The machine is shared with other work, so the arrangements run back to back in each of
    `rounds` rounds and the ratios are taken within a round (the arrangements compared saw the
    same load), then their median across rounds; the rates printed are medians too."""
    machine = frozenset(os.sched_getaffinity(0))
    cases = BY_NAME[EXERCISE].case_count  # hidden cases per grade
    arrangements = _arrangements(machine)
    per_core: dict[str, list[float]] = {a.label: [] for a in arrangements}
    for r in range(rounds):
        for k, arrangement in enumerate(arrangements):
            rate = _impl_throughput(url, redis_url, arrangement, jobs, f"{r}-{k}")
            per_core[arrangement.label].append(rate * cases / arrangement.cores(machine))
    for arrangement in arrangements:
        cores = arrangement.cores(machine)
        rates = per_core[arrangement.label]
        print(f"   impl throughput, {arrangement.label}: {statistics.median(rates) * cores / cases:.2f} grades/s, "
              f"{statistics.median(rates):.1f} cases/s per core ({cases} cases per grade, {cores} cores; "
              f"rounds: {', '.join(f'{x:.1f}' for x in rates)})")
    old, lanes, two = (per_core[a.label] for a in arrangements[:3])
    vs_two = statistics.median(x / y for x, y in zip(lanes, two, strict=True))
    vs_old = statistics.median(x / y for x, y in zip(lanes, old, strict=True))
    print(f"   1 worker with lanes vs 2 one-lane workers, cases/s per core: ratio {vs_two:.2f} (target >= 1); "
          f"vs 1 worker, 1 lane: ratio {vs_old:.2f} (medians of {rounds} rounds of {jobs} grades each)")


def _max_size_lines(sb: SandboxSettings) -> dict[str, bytes]:
    """Reporter-to-parent lines of the largest size the reporter lets through, in the shapes that
    cost a JSON reader most (a forged line past the reporter could look like these too)."""
    room = sb.max_result_bytes - 64
    values = {
        "escaped 2-byte characters": ["\u0416" * 4000] * (room // 24006),
        "empty lists": [[]] * (room // 3),
        "numbers": [0.123456789012345] * (room // 18),
        "nesting": [[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]] * (room // 42),
    }
    return {name: (json.dumps({"kind": "final", "result": {"kind": "value", "value": v}, "stage": 3},
                              separators=(",", ":")) + "\n").encode() for name, v in values.items()}


def max_result_read_cost() -> None:
    """Parent CPU (this thread's) to read one maximum-size result off a pipe and judge it."""
    sb = SandboxSettings()
    case = Case(args=(), expected=1.0)
    worst = 0.0
    for name, line in _max_size_lines(sb).items():
        r, w = os.pipe()

        def write(w: int = w, line: bytes = line) -> None:
            os.write(w, line)
            os.close(w)

        writer = threading.Thread(target=write)
        writer.start()
        child = Child(popen=None, result_fd=r, tier="bench", seccomp=False, profile="bare",  # type: ignore[arg-type]
                      uid=None, workdir=None, started=0.0)
        start = time.thread_time()
        while not child.lines and read_messages(child, 5.0):
            pass
        verdict = assess(case, CaseRun("finished", final=child.lines[0], armed={}), 1e-6, 1.0, sb.max_result_items)
        spent = time.thread_time() - start
        writer.join()
        os.close(r)
        worst = max(worst, spent)
        print(f"   read+judge a {len(line) / 1024:.0f} KiB result of {name}: {spent * 1e3:.1f} ms CPU "
              f"({verdict.verdict})")
    print(f"   max-size result: worst {worst * 1e3:.1f} ms CPU, ratio to the 100 ms target {worst / 0.1:.2f}")


# Each case of a hostile grade forges one costly result frame (chosen by its input), holds its
# sandbox a second longer (so four such cases stay in flight) and exits.
_HOSTILE = """
import os, time

FRAMES = [
    '"' + "\\u0416" * (8 << 20) + '"',
    "[" + ",".join(['"' + "\\u0416" * 4000 + '"'] * 5) + "]",
    "[" * 30000 + "]" * 30000,
    "[" + ",".join(["[]"] * 20000) + "]",
]

def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):
    body = ('{"kind": "value", "value": ' + FRAMES[int(peak_flops) % 4] + '}').encode()
    data = len(body).to_bytes(8, "big") + body
    for fd in range(3, 64):
        try:
            os.set_blocking(fd, True)
            os.write(fd, data)
        except OSError:
            pass
    time.sleep(1.0)
    os._exit(0)
"""


def _honest_latencies(url: str, n: int) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=300) as client:
        for _ in range(n):
            start = time.perf_counter()
            body = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": _impl_completion(),
                                                  "wait": 120}).json()
            assert body["reward"] == 1.0, body
            out.append(time.perf_counter() - start)
    return out


def hostile_run(smoke: bool) -> None:
    """Embedded service: an honest impl grade and numeric p99, alone and with 4 hostile cases in
    flight (two hostile grades, each running two cases at a time)."""
    honest_n, seconds = (1, 2.0) if smoke else (5, 10.0)
    env = {**ENV, "SCALING_GRADER_SANDBOX__MAX_PARALLEL_CASES": "2"}
    hostile_code = "```python\n" + _HOSTILE + "\n```"
    with running_server(env) as url:
        port = int(url.rsplit(":", 1)[1])
        numeric = [request_bytes("127.0.0.1", port, "POST", "/v1/grade", b) for b in _numeric_bodies()]
        _honest_latencies(url, 2)  # warm the pool and the imports

        def numeric_load() -> list[float]:
            load = asyncio.run(run_load("127.0.0.1", port, lambda i: numeric[i % len(numeric)], connections=4,
                                        seconds=seconds))
            return load.latencies

        solo_numeric = numeric_load()
        solo = _honest_latencies(url, honest_n)
        stop = threading.Event()
        hostile_rewards: list[float] = []

        def hostile_loop(k: int) -> None:
            with httpx.Client(base_url=url, timeout=300) as client:
                i = 0
                while not stop.is_set():
                    i += 1  # a new completion text each time: fresh cases, no idempotent reuse
                    text = hostile_code + f"\n# attempt {k}-{i}\n"
                    body = client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": text,
                                                          "wait": 120}).json()
                    hostile_rewards.append(body.get("reward", -1.0))

        loops = [threading.Thread(target=hostile_loop, args=(k,)) for k in range(2)]
        for t in loops:
            t.start()
        time.sleep(1.0)  # let the hostile cases get going
        try:
            under_numeric: list[float] = []
            numeric_thread = threading.Thread(target=lambda: under_numeric.extend(numeric_load()))
            numeric_thread.start()
            under = _honest_latencies(url, honest_n)
            numeric_thread.join()
        finally:
            stop.set()
            for t in loops:
                t.join()
    solo_s, under_s = percentile(solo, 0.5), percentile(under, 0.5)
    p99_solo, p99_under = (percentile(x, 0.99) * 1e3 for x in (solo_numeric, under_numeric))
    print(f"   honest impl grade: solo {solo_s:.2f} s, with 4 hostile cases in flight {under_s:.2f} s, "
          f"ratio {under_s / solo_s:.2f} (target <= 2)")
    print(f"   numeric p99: solo {p99_solo:.1f} ms, with hostile cases {p99_under:.1f} ms, "
          f"ratio to the 50 ms target {p99_under / 50:.2f}")
    earned = sum(max(r, 0.0) for r in hostile_rewards)
    print(f"   hostile grades: {len(hostile_rewards)} finished, rewards earned {earned}")


def main(smoke: bool) -> None:
    seconds, impl_jobs = (3.0, 4) if smoke else (20.0, 30)
    redis = RedisServer().start()
    try:
        env = {"SCALING_GRADER_REDIS_URL": redis.url, **ENV}
        with running_server(env) as url:
            port = int(url.rsplit(":", 1)[1])
            numeric = [request_bytes("127.0.0.1", port, "POST", "/v1/grade", b) for b in _numeric_bodies()]
            impl = request_bytes("127.0.0.1", port, "POST", "/v1/grade",
                                 {"task_id": f"impl/{EXERCISE}", "completion": _impl_completion()})

            def check(i: int, body: bytes) -> bool:
                return json.loads(body)["reward"] == 1.0

            async def mixed() -> tuple:
                # 56 clients grade numeric answers while 8 post impl gradings that wait for their
                # result: a closed loop per client, all 64 at once.
                return await asyncio.gather(
                    run_load("127.0.0.1", port, lambda i: numeric[i % len(numeric)], connections=56,
                             seconds=seconds, check=check),
                    run_load("127.0.0.1", port, lambda i: impl, connections=8, seconds=seconds, check=check),
                )

            workers = [start_worker(redis.url, f"load-{i}", ENV) for i in range(2)]
            try:
                loads = asyncio.run(mixed())
            finally:
                for w in workers:
                    stop_worker(w)
            for kind, load in zip(("numeric", "impl"), loads, strict=True):
                p50, p99 = (percentile(load.latencies, q) * 1e3 for q in (0.5, 0.99))
                print(f"   {kind}: {load.ok} done, {load.rps:,.1f}/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                      f"errors {load.errors}")
            total = sum(load.ok for load in loads) / max(load.seconds for load in loads)
            print(f"   64 clients, 2 workers: {total:,.0f} grades/s in all, errors {sum(x.errors for x in loads)}")
            impl_scaling(url, redis.url, impl_jobs, rounds=1 if smoke else 3)
    finally:
        redis.close()
    max_result_read_cost()
    hostile_run(smoke)
