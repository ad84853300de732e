"""A hostile client's worst: the most CPU one item and one request can cost, and what that does
to everyone else. In-process, each adversarial completion shape (at the completion size limit,
by task id and by inline reference) and the worst rows answer (every row right, in reverse
order, which the old order check compared pairwise) are graded and their CPU time printed
against a typical numeric item measured in the same run. Then a real server is attacked by
several clients at once (batches of worst items and of reversed rows, a synthetic listing at
offset 2**62, large reward queries, legal batches of many small JSON values refused after
parsing) while /healthz is probed every 20 ms: its latency under attack is printed against the
same probe with the server idle. Target: /healthz p99 < 50 ms. The server's CPU is counted with
that of its grading processes (app/grading/processes.py), and a line says where grading ran."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from app.grading.models import GradeRequest
from app.grading.service import GradingService
from app.settings import Settings
from app.tasks.synthetic.bank import SyntheticBank
from bench.bench_http import cpu_seconds, served
from bench.timing import percentile

TASK = SyntheticBank().get("synthetic/0/1")
REFERENCE = {"reference": {"values": ["1 s", "2 GB"]}}


def shapes(n: int) -> dict[str, str]:
    """Adversarial completions of about ``n`` characters (the grading probe's worst shapes)."""
    made = {
        "final-answer lines": "Final answer: 1 s\n" * (n // 18),
        "unclosed boxes": "\\boxed{" * (n // 7),
        "one deep box": "\\boxed{" + "{" * (n - 10) + "}",
        "a long number": "Final answer: " + "9" * n,
        "many quantities": "Final answer: " + "1 s, " * (n // 5),
        "unit chain": "Final answer: 1 " + "GB/" * (n // 3),
        "products": "Final answer: 2" + " x 2" * (n // 4),
        "open thinking": "<think>" * (n // 7),
        "fences": "```\n" * (n // 4),
        "struck tags": "<s>" * (n // 3),
        "look-alike labels": "Final аnswer: 1 s\n" * (n // 18),
        "latex fractions": "Final answer: " + "\\frac{" * (n // 6),
        "mixed": "Final answer: \\boxed{1 s} <think> `x` ~~y~~ " * (n // 45),
    }
    return {name: text[:n] for name, text in made.items()}


def rows_worst(n_chars: int) -> tuple[dict, str]:
    """An inline rows reference and an answer with every row right but in reverse order, as many
    rows as fit in ``n_chars`` (the order check's old worst case)."""
    rows = [{"name": "r", "x": i + 0.5} for i in range(max(2, min(1000, n_chars // 24)))]
    completion = json.dumps({"rows": rows[::-1]})
    return {"reference": {"rows": rows}}, completion


def many_values_batch(request_bytes: int) -> bytes:
    """A legal batch of as many thousand-row references as fit (about 5,000 JSON values each), the
    last item invalid: its cost is the parse alone."""
    reference, _ = rows_worst(26_000)
    item = {**reference, "completion": "Final answer: 1 s"}
    n = max(2, min(512, request_bytes // len(json.dumps(item))))
    return json.dumps({"items": [item] * (n - 1) + [{**item, "completion": 5}]}).encode()


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU of the server and of every process under it (its grading processes)."""
    own = cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(cpu_seconds(child) or 0.0 for child in descendants(pid))


def offload_line(pid: int) -> str:
    """Where the server grades: in grading processes (children of a fork server under it) or on
    threads of its own process."""
    under = descendants(pid)
    parents = {p: Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1] for p in under
               if os.path.exists(f"/proc/{p}/stat")}
    graders = [p for p, parent in parents.items() if int(parent) != pid and
               b"multiprocessing.forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    if not graders:
        return "offload: grading threads in the server process (no grading processes under it)"
    nice = sorted({os.getpriority(os.PRIO_PROCESS, p) for p in graders})
    return (f"offload: grading processes, {len(graders)} under the server's fork server (nice "
            f"{', '.join(map(str, nice))}); the server's CPU below includes theirs")


def cpu_of(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def per_item(settings: Settings, size: int) -> list[tuple[str, float]]:
    service = GradingService(settings)

    def grade(body: dict) -> Callable[[], object]:
        request = GradeRequest.model_validate(body)
        return lambda: service.grade_now(*service.prepare(request), request)

    typical = {"task_id": TASK.id, "completion": "Some reasoning.\nFinal answer: " + ", ".join(TASK.gold)}
    found = [("typical numeric item (baseline)", min(cpu_of(grade(typical)) for _ in range(20)))]
    for name, text in shapes(size).items():
        for target in ({"task_id": TASK.id}, REFERENCE):
            label = f"{name} ({'task id' if 'task_id' in target else 'reference'})"
            found.append((label, cpu_of(grade({**target, "completion": text}))))
    reference, completion = rows_worst(min(size, 26_000))
    rows_cpu = cpu_of(grade({**reference, "completion": completion}))
    found.append((f"rows reversed, {len(completion) // 1000} KB", rows_cpu))
    return found


class Prober(threading.Thread):
    """GET /healthz every 20 ms; latencies in seconds."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.latencies: list[float] = []

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                start = time.perf_counter()
                client.get(self.url + "/healthz")
                self.latencies.append(time.perf_counter() - start)
                time.sleep(0.02)


def probe(url: str, seconds: float, attack: Callable[[], None] | None) -> list[float]:
    prober = Prober(url)
    prober.start()
    if attack is None:
        time.sleep(seconds)
    else:
        attack()
    prober.stop.set()
    prober.join()
    return prober.latencies


def attackers(url: str, worst: str, request_bytes: int, clients: int, rounds: int) -> Callable[[], None]:
    per_item_bytes = len(json.dumps(worst)) + 64
    n = max(1, min(512, request_bytes // per_item_bytes - 1))
    batch = json.dumps({"items": [{"task_id": TASK.id, "completion": worst}] * n}).encode()
    reference, rows = rows_worst(26_000)
    rows_batch = json.dumps({"items": [{**reference, "completion": rows}] * max(1, request_bytes // 60_000)}).encode()
    reward = json.dumps({"query": [worst] * n, "labels": [TASK.id] * n}).encode()
    # Many small values: all parsing (the last item is refused, so nothing is graded).
    parsed = many_values_batch(request_bytes)
    json_headers = {"content-type": "application/json"}

    def one(client: httpx.Client) -> None:
        for _ in range(rounds):
            client.post("/v1/grade/batch", content=batch, headers=json_headers)
            client.post("/v1/grade/batch", content=rows_batch, headers=json_headers)
            client.post("/get_reward", content=reward, headers=json_headers)
            client.post("/v1/grade/batch", content=parsed, headers=json_headers)
            client.get("/v1/tasks", params={"split": "synthetic", "chapters": "roofline", "offset": 2**62, "n": 64})

    def attack() -> None:
        threads = []
        for _ in range(clients):
            client = httpx.Client(base_url=url, timeout=600)
            threads.append(threading.Thread(target=one, args=(client,)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return attack


def main(smoke: bool = False) -> None:
    settings = Settings()
    size = 20_000 if smoke else settings.limits.max_completion_chars
    found = per_item(settings, size)
    baseline = found[0][1]
    print(f"CPU per item at {size} characters (typical numeric item: {baseline * 1e3:.2f} ms):")
    for label, seconds in sorted(found[1:], key=lambda f: -f[1])[: 6 if smoke else 12]:
        print(f"  {label:44} {seconds * 1e3:8.1f} ms  ({seconds / baseline:,.0f}x typical)")
    worst_label, worst = max(found[1:], key=lambda f: f[1])
    print(f"worst item: {worst_label}, {worst * 1e3:.0f} ms of CPU")

    # The numeric shape that cost most fills the requests below.
    texts = shapes(size)
    worst_text = max(((texts[label.rsplit(" (", 1)[0]], cpu) for label, cpu in found[1:]
                      if label.rsplit(" (", 1)[0] in texts), key=lambda f: f[1])[0]
    request_bytes = 256 * 1024 if smoke else settings.limits.max_request_bytes
    n = max(1, min(settings.limits.max_grades_per_batch, request_bytes // (len(json.dumps(worst_text)) + 64) - 1))
    one_request = json.dumps({"items": [{"task_id": TASK.id, "completion": worst_text}] * n})
    with served(["--factory", "app.main:create_app"]) as (port, pid):
        url = f"http://127.0.0.1:{port}"
        idle = probe(url, 1.0 if smoke else 5.0, None)
        print(offload_line(pid))
        before, wall = tree_cpu_seconds(pid), time.perf_counter()
        r = httpx.post(url + "/v1/grade/batch", content=one_request, timeout=600,
                       headers={"content-type": "application/json"})
        after, wall = tree_cpu_seconds(pid), time.perf_counter() - wall
        if before is not None and after is not None:
            print(f"worst request: a {len(one_request) // 1024} KiB batch of {n} such items, {after - before:.1f} s of "
                  f"server CPU, {wall:.1f} s wall, status {r.status_code}")
        # Several clients at once, each with bodies of a megabyte (an eighth of the limit, so the
        # run ends on a shared machine): what matters is that grading runs while /healthz asks.
        clients, attack_bytes = (2, request_bytes) if smoke else (3, 1024 * 1024)
        attacked = probe(url, 0, attackers(url, worst_text, attack_bytes, clients, 1))
    for name, values in (("idle", idle), ("under attack", attacked)):
        p50, p99 = percentile(values, 0.5) * 1e3, percentile(values, 0.99) * 1e3
        print(f"/healthz {name:13} p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  max {max(values) * 1e3:6.1f} ms  "
              f"({len(values)} probes)")
    ratio = percentile(attacked, 0.99) / percentile(idle, 0.99)
    print(f"/healthz p99 under attack / idle: {ratio:.1f}x; target p99 < 50 ms: "
          f"{'met' if percentile(attacked, 0.99) < 0.05 else 'NOT met'}")


if __name__ == "__main__":
    main()
