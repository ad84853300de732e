"""Memory soak: a real server graded with mixed requests whose unit texts are all different, to
show that nothing keyed by candidate text grows without bound. Prints the server's RSS after a
warm-up and at the end, and their ratio.

    python -m bench soak            # 30 minutes (SOAK_SECONDS overrides)
    python -m bench --smoke soak    # a few seconds: proves the benchmark runs

The mix: numeric grades by task id (synthetic) with random unit texts in the answer, inline
references whose gold is a random quantity, rows grades (tasks split), batches, reward calls,
and chat transcripts. Every grade must be scored (an unscored inline grade is counted as an
error). Target: end RSS at most 1.10x the RSS after warm-up."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.support.server import ROOT, free_port, stop_process, wait_until_up

PREFIXES = ["", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "m", "µ", "u", "n", "p", "kilo", "giga",
            "tera", "mebi", "zz", "Q"]
BASES = ["B", "b", "byte", "bytes", "bit", "s", "sec", "seconds", "min", "h", "day", "FLOP", "FLOPs", "FLOPS", "flop",
         "OP", "OPs", "Bps", "bps", "%", "chips", "tokens", "params", "layers", "GPUs", "xyz", "Foo", "q"]
SEPARATORS = ["/", " / ", " per ", "·", "*", " "]


def random_unit(rng: random.Random) -> str:
    """A unit text drawn from a space far larger than any cache: prefixes x bases x chains."""
    words = [rng.choice(PREFIXES) + rng.choice(BASES) for _ in range(rng.randint(1, 12))]
    text = words[0]
    for word in words[1:]:
        text += rng.choice(SEPARATORS) + word
    if rng.random() < 0.3:
        text += "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 8)))
    return text


def random_number(rng: random.Random) -> str:
    value = rng.uniform(0.001, 1e4)
    return rng.choice([f"{value:.4g}", f"{value:.3e}", f"{value:.2f} ± 0.1", f"{value:.3g} × 10^{rng.randint(-9, 15)}"])


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (a uvicorn worker, if any)."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class Mix:
    def __init__(self, url: str, seed: int) -> None:
        from app.tasks.synthetic.bank import SyntheticBank
        from app.tasks.tasks.bank import build_tasks

        self.url = url
        self.rng = random.Random(seed)
        self.synthetic = [t.id for t in SyntheticBank().batch(seed=seed, n=256)]
        self.rows = [(f"tasks/{t.task_id}", t.expected_output["rows"]) for t in build_tasks()]
        self.grades = self.errors = self.requests = 0

    def _answer(self) -> str:
        rng = self.rng
        values = ", ".join(f"{random_number(rng)} {random_unit(rng)}" for _ in range(rng.randint(1, 4)))
        return f"Working...\nFinal answer: {values}"

    def item(self) -> dict:
        rng = self.rng
        kind = rng.random()
        if kind < 0.45:
            return {"task_id": rng.choice(self.synthetic), "completion": self._answer()}
        if kind < 0.7:
            gold = f"{random_number(rng).split(' ')[0]} {rng.choice(['s', 'GB', 'TB/s', 'FLOPs', 'chips'])}"
            return {"reference": {"values": [gold]}, "completion": self._answer()}
        if kind < 0.85:
            task_id, rows = rng.choice(self.rows)
            rows = [dict(r) for r in rows]
            if rng.random() < 0.5:
                rows[0] = {f"{random_unit(rng)}": random_number(rng)}
            return {"task_id": task_id, "completion": f"```json\n{json.dumps({'rows': rows})}\n```"}
        messages = [{"role": rng.choice(["user", "tool", "system"]), "content": self._answer()},
                    {"role": rng.choice(["assistant", "model", "Assistant", "user"]), "content": self._answer()}]
        return {"task_id": rng.choice(self.synthetic), "completion": messages}

    def run(self, client: httpx.Client, deadline: float) -> None:
        while time.monotonic() < deadline:
            roll = self.rng.random()
            if roll < 0.6:
                body = client.post("/v1/grade", json=self.item())
                results = [body.json()] if body.status_code == 200 else None
            elif roll < 0.85:
                body = client.post("/v1/grade/batch", json={"items": [self.item() for _ in range(32)]})
                results = body.json()["results"] if body.status_code == 200 else None
            else:
                body = client.post("/v1/rewards", json={"items": [self.item() for _ in range(32)]})
                rewards = body.json()["rewards"] if body.status_code == 200 else None
                results = None if rewards is None else [{"outcome": "scored"} if r is not None else
                                                        {"outcome": "error"} for r in rewards]
            self.requests += 1
            if results is None:
                self.errors += 1
                continue
            self.grades += len(results)
            self.errors += sum(r.get("outcome") in ("error", "invalid_request") for r in results)


def main(smoke: bool) -> None:
    seconds = 4.0 if smoke else float(os.environ.get("SOAK_SECONDS", 1800))
    warmup = min(60.0, seconds / 10)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level",
         "warning"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        mixes = [Mix(url, seed) for seed in range(2)]
        clients = [httpx.Client(base_url=url, timeout=60) for _ in mixes]
        start = time.monotonic()
        threads = [threading.Thread(target=m.run, args=(c, start + warmup)) for m, c in zip(mixes, clients,
                                                                                            strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rss_start = rss_bytes(process.pid)
        samples = [rss_start]
        end = start + warmup + seconds

        threads = [threading.Thread(target=m.run, args=(c, end)) for m, c in zip(mixes, clients, strict=True)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(min(30.0, max(0.5, seconds / 20)))
            samples.append(rss_bytes(process.pid))
        for t in threads:
            t.join()
        rss_end = rss_bytes(process.pid)
        for c in clients:
            c.close()
    finally:
        stop_process(process)
    grades = sum(m.grades for m in mixes)
    errors = sum(m.errors for m in mixes)
    mb = 1024 * 1024
    print(f"   {seconds:.0f} s after a {warmup:.0f} s warm-up: {grades:,} grades in "
          f"{sum(m.requests for m in mixes):,} requests, {errors} errors")
    print(f"   RSS start {rss_start / mb:.1f} MB, end {rss_end / mb:.1f} MB, peak {max(samples) / mb:.1f} MB")
    print(f"   growth ratio (end / start): {rss_end / rss_start:.3f}   target <= 1.10")
