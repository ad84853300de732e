"""Soak of the container stack (docker-compose.yml, two gVisor workers) as an operator runs it:
mixed load for a set time with a fault every few minutes, and what piles up measured start vs end.

    make bench-stack-soak                      # 60 minutes (STACK_SOAK_SECONDS overrides)
    python -m bench stack_soak                 # the same
    python -m bench --smoke stack_soak         # 3 minutes
    STACK_SOAK_SECONDS=900 python -m bench stack_soak

Needs Docker (deploy/stack.sh engine) and runs only when named. It starts its own stack
(STACK_SOAK_NAME, default sg-soak, on port STACK_SOAK_PORT, default 18500; images from
deploy/images.sh, API_IMAGE and WORKER_IMAGE honoured) on a compose network with a fixed subnet,
and the loopback judge (tests/fake_openai.py) on the host, bound to that network's gateway only.
BOOK_MIRROR (or SCALING_GRADER_BOOK_MIRROR) adds the book's judge items. KEEP_STACK=1 leaves the
stack up afterwards.

First, impl jobs alone (STACK_SOAK_IMPL_ALONE_SECONDS of posts, default 4 minutes, 30 s in smoke
mode): the 24 rollout workers below post honest and hostile impl completions and wait for their
rewards, with no numeric grades, judge items or faults, and Redis's commands from the first post
to the last answer divided by the jobs answered give the commands per queued impl job with
nothing taken out (the stack's idle upkeep in that time is printed beside it).

Load: numeric grades (inline references) at a steady rate with bursts; 24 rollout workers, each
posting an impl job and waiting for its reward with the API's wait (no polling) before the next,
more than the workers grade at once (a backlog in the queue): honest completions (right, wrong, half-right),
hostile ones (a CPU spin to the time limit, a fork bomb, a memory hog, a flood of output), and
the same completions again and again; judge items against the loopback judge. Faults in turn: a
worker killed, Redis restarted, a worker cut from the network for 20 s, workers scaled 2->3->2.

Printed, start vs end: zombies, open fds and RSS per container (the service's own processes: not
gVisor's, nor Docker's health probe; for a container a fault killed and started again, also its
last life's memory once warm against the end, and for each the samples taken every minute
and their peak), dying memory cgroups on the host, Redis memory, and Redis commands per queued
job (of the impl jobs alone; then under the mixed load, from the start to the first fault and over
the whole run across Redis's restarts, a numeric grade's share, measured on the quiet stack beyond
its idle upkeep, taken out); jobs sent,
answered, lost, rewritten (a result that changed after the client read it), rewards that differ
for the same completion, unscored impl jobs; numeric p50/p99 on the quiet stack and under the
load, and the impl backlog. Targets: 0 lost, 0 rewritten, 0 inconsistent, zombies and dying
cgroups flat, RSS <= 1.1x."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.tasks.impl import reference
from bench.timing import percentile
from tests.support.server import ROOT

STACK = ROOT / "deploy" / "stack.sh"
SUBNET_PREFIX = "10.231.77"  # the soak's own compose network; the host is its gateway (.1)
EXERCISE = "critical_batch_size"

RIGHT_SOURCE = inspect.getsource(getattr(reference, EXERCISE))
HONEST = {
    "right": RIGHT_SOURCE,
    # forgets the bytes per weight
    "wrong": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
             "    import math\n    return math.ceil(peak_flops / hbm_bandwidth)\n",
    # right only for 2-byte weights: some hidden cases pass, some fail
    "half_right": RIGHT_SOURCE.replace("peak_flops * bytes_per_weight", "peak_flops * 2"),
}
HOSTILE = {
    "cpu_spin": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                "    while True:\n        pass\n",
    "fork_bomb": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                 "    import os\n    while True:\n        try:\n            os.fork()\n"
                 "        except OSError:\n            pass\n",
    "memory_hog": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                  "    blocks = []\n    while True:\n        blocks.append(bytearray(16 << 20))\n",
    "output_flood": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                    "    while True:\n        print('x' * 65536)\n",
    "read_system_files": "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
                         "    import os\n    n = 0\n    for root, _, files in os.walk('/usr/lib'):\n"
                         "        for name in files:\n            try:\n"
                         "                with open(os.path.join(root, name), 'rb') as f:\n"
                         "                    n += len(f.read())\n            except OSError:\n"
                         "                pass\n    return n\n",
}


def completion(source: str) -> str:
    return f"My implementation:\n\n```python\n{source.strip()}\n```\n"


def sh(*args: str, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} failed: {done.stderr.strip()[-1500:]}")
    return done.stdout.strip()


# ---------------------------------------------------------------------------- the stack


@dataclass
class SoakStack:
    project: str
    port: int
    env: dict[str, str]
    judge_url: str = ""
    api_key: str = ""
    # Redis's counters as last read before each restart a fault made (a restart resets them): with
    # the readings at the start and the end they give the commands of the whole run
    redis_lives: list[dict[str, int]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def stack(self, *args: str, timeout: float = 1800) -> str:
        return sh(str(STACK), *args, env=self.env, timeout=timeout)

    def containers(self, service: str | None = None) -> dict[str, str]:
        """Running containers of the project: id -> name."""
        args = ["docker", "ps", "--no-trunc", "--filter", f"label=com.docker.compose.project={self.project}",
                "--format", "{{.ID}} {{.Names}}"]
        if service:
            args[5:5] = ["--filter", f"label=com.docker.compose.service={service}"]
        out = sh(*args)
        return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())

    def redis(self, *args: str) -> str:
        redis = next(iter(self.containers("redis")), None)
        if redis is None:
            return ""
        return sh("docker", "exec", redis, "redis-cli", *args, check=False, timeout=30)


def start_stack(smoke: bool) -> tuple[SoakStack, subprocess.Popen[str]]:
    project = os.environ.get("STACK_SOAK_NAME", "sg-soak")
    port = int(os.environ.get("STACK_SOAK_PORT", "18500"))
    build = ROOT / ".build" / "stack-soak"
    build.mkdir(parents=True, exist_ok=True)
    overlay = build / "compose.soak.yml"
    # A fixed subnet: the judge's address (the network's gateway, this host) is known before the
    # stack starts, so it can be on the allow-list the containers start with.
    overlay.write_text(f"networks:\n  default:\n    ipam:\n      config:\n        - subnet: {SUBNET_PREFIX}.0/24\n")
    judge_port = port + 1
    env = {
        "STACK_NAME": project, "PORT": str(port), "WORKERS": "2",
        "EXTRA_COMPOSE": " ".join(filter(None, [os.environ.get("EXTRA_COMPOSE", ""), str(overlay)])),
        "JUDGE_ALLOWED_BASE_URLS": json.dumps([f"http://{SUBNET_PREFIX}.1:{judge_port}/v1"]),
        "TENANT_RATE": "2000", "TENANT_BURST": "4000", "TENANT_MAX_IN_FLIGHT": "4096",
    }
    mirror = os.environ.get("BOOK_MIRROR") or os.environ.get("SCALING_GRADER_BOOK_MIRROR")
    if mirror:
        env["BOOK_MIRROR"] = mirror
    soak = SoakStack(project, port, env, judge_url=f"http://{SUBNET_PREFIX}.1:{judge_port}/v1")
    with contextlib.suppress(RuntimeError):
        soak.stack("down", timeout=300)  # a stack left by an earlier run starts from its state
    started = time.monotonic()
    soak.stack("up")
    print(f"stack {project} up in {time.monotonic() - started:.0f} s (2 workers)")
    soak.api_key = (ROOT / ".build" / "stack" / "api-key").read_text().strip()
    judge = subprocess.Popen(
        [sys.executable, "-c", _JUDGE, f"{SUBNET_PREFIX}.1", str(judge_port)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert judge.stdout is not None
    judge.stdout.readline()  # its base URL: it is listening
    return soak, judge


# The loopback judge on the network's gateway address only (never 0.0.0.0).
_JUDGE = """
import sys
from http.server import ThreadingHTTPServer
import tests.fake_openai as fake

host, port = sys.argv[1], int(sys.argv[2])
class OnGateway(ThreadingHTTPServer):
    def __init__(self, _address, handler):
        super().__init__((host, port), handler)
fake.ThreadingHTTPServer = OnGateway
sys.argv = sys.argv[:1]
fake.main()
"""


# ---------------------------------------------------------------------------- what piles up


# gVisor's host processes (runsc, and runsc re-executed as its gofer, sandbox and helpers) and the
# container's init: counted apart from the service's own processes, which must not grow.
_NOT_SERVICE = {"runsc", "exe", "docker-init", "tini"}


def _is_health_check(pid: int) -> bool:
    """Docker's health probe (docker/healthcheck.py, a Python process of 20 to 30 MB that lives
    under a second): caught by a reading, it would count as the service's growth."""
    with contextlib.suppress(OSError):
        return b"healthcheck" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def _proc_facts(pids: list[int]) -> dict[str, int]:
    """Zombies of all these host processes; open fds and RSS of the service's own among them."""
    facts = {"processes": len(pids), "zombies": 0, "fds": 0, "rss": 0}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "\nState:\tZ" in status:
            facts["zombies"] += 1
            continue
        if name in _NOT_SERVICE or _is_health_check(pid):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                facts["rss"] += int(line.split()[1]) * 1024
        with contextlib.suppress(OSError):
            facts["fds"] += len(os.listdir(f"/proc/{pid}/fd"))
    return facts


def container_facts(soak: SoakStack) -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    for cid, name in soak.containers().items():
        try:
            top = sh("docker", "top", cid, "-eo", "pid", check=True, timeout=30)
        except (RuntimeError, subprocess.TimeoutExpired):
            continue
        facts[name] = dict(_proc_facts([int(line) for line in top.splitlines()[1:] if line.strip().isdigit()]))
        # Which life of the container this is: a worker killed and started again is the same
        # container (same name) with new processes, whose memory starts cold again.
        facts[name]["started"] = sh("docker", "inspect", "-f", "{{.State.StartedAt}}", cid, check=False, timeout=30)
    return facts


def dying_memory_cgroups() -> int | None:
    """The host's memory cgroups the kernel still holds less the live ones (v1), or v2's count."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        stat = Path("/sys/fs/cgroup/cgroup.stat")
        if stat.exists():
            return int(dict(line.split() for line in stat.read_text().splitlines())["nr_dying_descendants"])
        kernel = next(int(line.split()[2]) for line in Path("/proc/cgroups").read_text().splitlines()
                      if line.startswith("memory\t"))
        return kernel - sum(1 for _ in Path("/sys/fs/cgroup/memory").rglob("cgroup.procs"))
    return None


def redis_facts(soak: SoakStack) -> dict[str, int]:
    """Redis's memory, its command count, and its calls of each command ("calls:hset", ...)."""
    facts: dict[str, int] = {}
    for section in ("memory", "stats", "commandstats"):
        for line in soak.redis("info", section).splitlines():
            key, _, value = line.strip().partition(":")
            if key in ("used_memory", "total_commands_processed"):
                facts[key] = int(value)
            elif key.startswith("cmdstat_") and value.startswith("calls="):
                facts[f"calls:{key.removeprefix('cmdstat_')}"] = int(value.split(",")[0].removeprefix("calls="))
    return facts


# Redis commands the soak itself sends (its readings of Redis's counters), left out of every count.
_SOAKS_OWN = ("info", "config|resetstat")


def _calls(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls of each command between two of redis_facts' readings (not the soak's own)."""
    return {name: after[k] - before.get(k, 0) for k in after
            if k.startswith("calls:") and (name := k.removeprefix("calls:")) not in _SOAKS_OWN}


def whole_run_calls(start: dict[str, int], lives: list[dict[str, int]], end: dict[str, int]) -> dict[str, int]:
    """Calls of each command from ``start`` to ``end`` across Redis's restarts: the first life
    from the start to its last reading, each later one from zero (a restart resets the counters)."""
    first, *later = [*lives, end]  # the last reading of each life
    total: dict[str, int] = defaultdict(int, _calls(start, first))
    for reading in later:
        for name, calls in _calls({}, reading).items():
            total[name] += calls
    return dict(total)


def snapshot(soak: SoakStack) -> dict:
    return {"containers": container_facts(soak), "dying_memory_cgroups": dying_memory_cgroups(),
            "redis": redis_facts(soak), "at": time.monotonic(), "load": os.getloadavg()[0]}


# ---------------------------------------------------------------------------- load


@dataclass
class Ledger:
    """Everything sent and what came back."""

    numeric: list[tuple[float, float, int]] = field(default_factory=list)  # (sent at, seconds, status)
    jobs: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (kind, completion label)
    first_result: dict[str, dict] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)
    submit_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    backlog: list[tuple[float, int]] = field(default_factory=list)
    # (when, facts per container), once a minute: each container's memory over its lives
    containers: list[tuple[float, dict[str, dict]]] = field(default_factory=list)
    first_fault_at: float = float("inf")
    lock: threading.Lock = field(default_factory=threading.Lock)


def _numeric_once(client: httpx.Client, ledger: Ledger, rng: random.Random) -> None:
    value = rng.uniform(1, 1000)
    body = {"reference": {"values": [f"{value:.6g} GB"]}, "completion": f"So it is:\nFinal answer: {value:.6g} GB"}
    sent = time.monotonic()
    try:
        status = client.post("/v1/grade", json=body).status_code
    except httpx.HTTPError:
        status = 0
    with ledger.lock:
        ledger.numeric.append((sent, time.monotonic() - sent, status))


def numeric_load(soak: SoakStack, ledger: Ledger, stop: threading.Event, rate: float, burst_every: float) -> None:
    """rate grades/s, and every burst_every seconds a burst of 10x for two seconds."""
    rng = random.Random(1)
    with httpx.Client(base_url=soak.url, headers={"Authorization": f"Bearer {soak.api_key}"}, timeout=60) as client:
        start = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            bursting = (now - start) % burst_every < 2.0
            _numeric_once(client, ledger, rng)
            pause = 1.0 / (rate * (10 if bursting else 1)) - (time.monotonic() - now)
            if pause > 0:
                stop.wait(pause)


def measure_numeric(soak: SoakStack, seconds: float, rate: float) -> list[float]:
    """Latencies of numeric grades at rate for seconds, on whatever the stack is doing now."""
    ledger, stop = Ledger(), threading.Event()
    threads = [threading.Thread(target=numeric_load, args=(soak, ledger, stop, rate / 2, 1e9)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return [s for _, s, status in ledger.numeric if status == 200]


# Rollout workers, each with one job out: more than the two workers' lanes grade at once, so that
# impl jobs wait in the queue.
ROLLOUT_WORKERS = 24
# How long one request waits for a job's result: the API's longest wait.
RESULT_WAIT = 60.0


def _soak_body(soak: SoakStack, rng: random.Random, n: int, labels: list[tuple[str, str]],
               judge_items: list) -> tuple[dict, str, str]:
    """One impl or judge grade request of the mix: (body, kind, completion label)."""
    if judge_items and n % 5 == 0:
        task, right = rng.choice(judge_items), rng.random() < 0.5
        body = {"task_id": task.id, "completion": task.gold if right else "No idea.",
                "judge": {"model": "judge-match", "base_url": soak.judge_url}}
        return body, "judge", f"judge:{task.id}:{'right' if right else 'wrong'}"
    kind, name = rng.choice(labels)
    source = HONEST.get(name) or HOSTILE[name]
    return {"task_id": f"impl/{EXERCISE}", "completion": completion(source)}, kind, name


def _record(ledger: Ledger, job_id: str, body: dict) -> None:
    with ledger.lock:
        if job_id not in ledger.first_result:
            ledger.first_result[job_id] = body
            ledger.answered_at[job_id] = time.monotonic()


def _wait_for(client: httpx.Client, ledger: Ledger, give_up: threading.Event, job_id: str) -> None:
    """Waits for one job's result the way the API offers: a request held until the result is
    there (no polling), asked again only when RESULT_WAIT passes first or a fault cuts it."""
    while not give_up.is_set():
        try:
            r = client.get(f"/v1/jobs/{job_id}", params={"wait": RESULT_WAIT})
        except httpx.HTTPError:
            give_up.wait(1)
            continue
        if r.status_code == 200 and r.json().get("status") in ("finished", "failed"):
            _record(ledger, job_id, r.json())
            return
        if r.status_code != 200:
            give_up.wait(1)


def rollout_worker(soak: SoakStack, ledger: Ledger, stop: threading.Event, index: int, judge_items: list,
                   give_up: threading.Event | None = None) -> None:
    """One RL rollout worker: posts an impl (or judge) completion, waits for its reward, posts the
    next, until ``stop``. Honest and hostile completions, the same texts again and again; the soak
    runs more of these than the workers grade at once, so that jobs wait in the queue. A job out
    when ``stop`` comes is waited for until ``give_up`` (by default ``stop`` itself: not at all)."""
    rng = random.Random(1000 + index)
    labels = [("honest", k) for k in HONEST] * 2 + [("hostile", k) for k in HOSTILE]
    headers = {"Authorization": f"Bearer {soak.api_key}"}
    n = 0
    with httpx.Client(base_url=soak.url, headers=headers, timeout=RESULT_WAIT + 60) as client:
        while not stop.is_set():
            n += 1
            body, kind, label = _soak_body(soak, rng, n, labels, judge_items)
            body |= {"wait": RESULT_WAIT, "request_id": f"soak-{index}-{n}-{rng.getrandbits(32):x}"}
            try:
                r = client.post("/v1/grade", json=body)
            except httpx.HTTPError as exc:
                with ledger.lock:
                    ledger.submit_errors[type(exc).__name__] += 1
                stop.wait(1)
                continue
            if r.status_code not in (200, 202):
                with ledger.lock:
                    ledger.submit_errors[str(r.status_code)] += 1
                stop.wait(1)
                continue
            job_id = r.json().get("job_id") or f"inline-{index}-{n}"
            with ledger.lock:
                ledger.jobs[job_id] = (kind, label)
            if r.status_code == 200:  # the result itself: recorded as the job's view would show it
                _record(ledger, job_id, {"job_id": job_id, "status": "finished", "result": r.json()})
            else:
                _wait_for(client, ledger, give_up or stop, job_id)


# How long a job out when the impl-alone window closes is waited for: the backlog of 24 drains in
# about a minute and a half at the stack's rate; a job not answered by then is counted as unanswered.
IMPL_ALONE_DRAIN = 300.0


def impl_alone(soak: SoakStack, seconds: float, clients: int = ROLLOUT_WORKERS) -> dict[str, Any]:
    """Impl jobs alone, before the mixed load: the rollout workers post honest and hostile impl
    completions for ``seconds`` (no numeric grades, no judge items, no faults, none of the soak's
    samplers), then wait for the jobs they have out. Redis's commands from the first post to the
    last answer, divided by the jobs answered, are the commands per queued impl job with nothing
    taken out: the API's, the lanes' beats and upkeep, the stack's idle upkeep in that time."""
    ledger, stop, give_up = Ledger(), threading.Event(), threading.Event()
    threads = [threading.Thread(target=rollout_worker, args=(soak, ledger, stop, 100 + i, []),
                                kwargs={"give_up": give_up}, daemon=True) for i in range(clients)]
    before, began = redis_facts(soak), time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    deadline = time.monotonic() + IMPL_ALONE_DRAIN
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    give_up.set()
    for t in threads:
        t.join(timeout=10)
    calls = _calls(before, redis_facts(soak))
    kinds: dict[str, int] = defaultdict(int)
    for job_id in ledger.first_result:
        kinds[ledger.jobs[job_id][0]] += 1
    return {"calls": calls, "sent": len(ledger.jobs), "answered": len(ledger.first_result), "kinds": dict(kinds),
            "seconds": time.monotonic() - began, "posting": seconds}


def sample_backlog(soak: SoakStack, ledger: Ledger, stop: threading.Event) -> None:
    while not stop.is_set():
        text = soak.redis("llen", "rq:queue:impl")
        if text.isdigit():
            with ledger.lock:
                ledger.backlog.append((time.monotonic(), int(text)))
        stop.wait(5)


def sample_containers(soak: SoakStack, ledger: Ledger, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        facts = container_facts(soak)
        with ledger.lock:
            ledger.containers.append((time.monotonic(), facts))


def warm_since_last_start(name: str, end: dict, samples: list[tuple[float, dict[str, dict]]],
                          warmup: float) -> tuple[float, dict] | None:
    """The first sample of the container's last life (the one the end snapshot saw) taken at least
    warmup seconds after that life's first sample: its memory once warm, for a container that a
    fault killed and started again during the soak (comparing its cold restart with the end, or
    its first life with its last, would say nothing about growth)."""
    life = [(at, facts[name]) for at, facts in samples
            if name in facts and facts[name].get("started") == end.get("started")]
    return next(((at, f) for at, f in life if at - life[0][0] >= warmup), None) if life else None


# ---------------------------------------------------------------------------- faults


def _a_worker(soak: SoakStack, rng: random.Random) -> tuple[str, str] | None:
    workers = sorted(soak.containers("worker").items())
    return rng.choice(workers) if workers else None


def fault_kill_worker(soak: SoakStack, rng: random.Random) -> str:
    worker = _a_worker(soak, rng)
    if worker is None:
        return "kill a worker: none running"
    life = _state(worker[0])[1]
    # A worker full of gVisor sandboxes can take longer to go than Docker waits for its exit
    # event: `docker kill` then fails, and the worker dies all the same. One soak took that for a
    # failed fault and ran on one worker for 14 minutes. So: started again once it has really
    # stopped, unless its restart policy started it already (a new start time).
    killed = subprocess.run(["docker", "kill", worker[0]], capture_output=True, text=True, timeout=120)
    time.sleep(5)
    deadline = time.monotonic() + 120
    while (state := _state(worker[0]))[0] != "exited" and state[1] == life and time.monotonic() < deadline:
        time.sleep(1)
    if state[0] == "exited":
        sh("docker", "start", worker[0])
        state = _state(worker[0])
    slow = " (docker kill reported a failure; it died later)" if killed.returncode else ""
    return f"killed {worker[1]} (SIGKILL){slow}, started again ({state[0]})"


def _state(container: str) -> tuple[str, str]:
    """The container's status and when its current life began."""
    status, _, started = sh("docker", "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", container,
                            check=False).partition(" ")
    return status, started


def fault_restart_redis(soak: SoakStack, rng: random.Random) -> str:
    redis = next(iter(soak.containers("redis").items()))
    soak.redis_lives.append(redis_facts(soak))  # the commands of the life this restart ends
    sh("docker", "restart", "-t", "2", redis[0])
    return f"restarted {redis[1]}"


def fault_network_cut(soak: SoakStack, rng: random.Random) -> str:
    worker = _a_worker(soak, rng)
    if worker is None:
        return "network cut: no worker running"
    sh("docker", "network", "disconnect", soak.network, worker[0])
    time.sleep(20)
    sh("docker", "network", "connect", "--alias", "worker", soak.network, worker[0])
    return f"cut {worker[1]} from the network for 20 s"


def fault_scale(soak: SoakStack, rng: random.Random) -> str:
    soak.stack("scale", "3", timeout=900)
    time.sleep(30)
    soak.stack("scale", "2", timeout=1200)  # a graceful stop of the third
    return "scaled the workers 2 -> 3 -> 2"


FAULTS = [fault_kill_worker, fault_restart_redis, fault_network_cut, fault_scale]


# ---------------------------------------------------------------------------- report


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def _pcts(values: list[float]) -> str:
    if not values:
        return "no answers"
    return f"p50 {percentile(values, 0.5) * 1000:.1f} ms, p99 {percentile(values, 0.99) * 1000:.1f} ms ({len(values)})"


def report(start: dict, end: dict, ledger: Ledger, final: dict[str, dict], quiet: list[float],
           faults: list[str], seconds: float, warmup: float) -> None:
    print(f"\nsoak: {seconds / 60:.1f} min of load, {len(faults)} faults:")
    for line in faults:
        print(f"  - {line}")
    print(f"host load average (1 min), start -> end: {start['load']:.1f} -> {end['load']:.1f} "
          "(the machine is shared: other work on it counts in every latency below)")
    print("\nper container (start -> end): processes (gVisor's included), zombies, and the service's own "
          "open fds and RSS (gVisor's processes come and go with the cases)")
    for name in sorted(set(start["containers"]) | set(end["containers"])):
        a, b = start["containers"].get(name), end["containers"].get(name)
        if a is None or b is None:
            print(f"  {name}: {'started' if a is None else 'gone'} during the soak")
            continue
        ratio = b["rss"] / a["rss"] if a["rss"] else float("nan")
        print(f"  {name}: {a['processes']} -> {b['processes']} processes, zombies {a['zombies']} -> {b['zombies']}, "
              f"fds {a['fds']} -> {b['fds']}, RSS {_mib(a['rss'])} -> {_mib(b['rss'])} ({ratio:.2f}x)")
        if a.get("started") != b.get("started"):
            warm = warm_since_last_start(name, b, ledger.containers, warmup)
            if warm is None:
                print("      started again by a fault, too late for a warm sample of its last life")
            else:
                at, w = warm
                grown = b["rss"] / w["rss"] if w["rss"] else float("nan")
                print(f"      started again by a fault; its last life, warm ({(at - start['at']) / 60:.1f} min) "
                      f"-> end: RSS {_mib(w['rss'])} -> {_mib(b['rss'])} ({grown:.2f}x)")
        samples = [facts[name]["rss"] for at, facts in ledger.containers if name in facts and at >= start["at"]]
        # the whole course, so that a slow warm-up (a plateau) is told from growth
        course = " ".join(str(rss >> 20) for rss in samples)
        print(f"      RSS peak of the minute samples: {_mib(max(samples, default=b['rss']))}; MiB, in turn: {course}")
    print(f"dying memory cgroups on the host: {start['dying_memory_cgroups']} -> {end['dying_memory_cgroups']}")
    answered = [j for j in ledger.jobs if j in ledger.first_result]
    lost = [j for j in ledger.jobs if j not in final and j not in ledger.first_result]
    rs = start["redis"]
    memory = f"{_mib(rs.get('used_memory', 0))} -> {_mib(end['redis'].get('used_memory', 0))}"
    print(f"redis: memory {memory} (start -> end)")
    idle = sum(start.get("idle_rate", {}).values())
    print(f"redis, the idle stack before the load: {idle:.1f} commands/s (the lanes' upkeep, the API's); a numeric "
          f"grade beyond that: {sum(start.get('calls_per_numeric', {}).values()):.1f} (rate limits)")
    if start.get("impl_alone"):
        _report_impl_alone(start["impl_alone"], idle)
    if rs and end.get("redis_before_faults"):
        _redis_per_job("from the start to the first fault", _calls(rs, end["redis_before_faults"]), ledger,
                       answered, start, (start["at"], end["first_fault_at"]))
    if rs and end.get("loaded"):
        calls = whole_run_calls(rs, end.get("redis_lives", []), end["loaded"]["redis"])
        _redis_per_job(f"the whole run, across Redis's {1 + len(end.get('redis_lives', []))} lives", calls, ledger,
                       answered, start, (start["at"], end["loaded"]["at"]))
    rewritten = [j for j, body in final.items()
                 if j in ledger.first_result and _verdict(body) != _verdict(ledger.first_result[j])]
    by_completion: dict[str, set] = defaultdict(set)
    unscored: dict[str, int] = defaultdict(int)
    for job_id, body in {**ledger.first_result}.items():
        kind, label = ledger.jobs[job_id]
        status, reward, outcome = _verdict(body)
        if reward is None or status == "failed":
            unscored[f"{label} ({outcome or status})"] += 1
            continue
        by_completion[label].add(reward)
    inconsistent = {label: sorted(v) for label, v in by_completion.items() if len(v) > 1}
    kinds: dict[str, int] = defaultdict(int)
    for kind, _ in ledger.jobs.values():
        kinds[kind] += 1
    print(f"jobs: sent {len(ledger.jobs)} ({dict(kinds)}), answered {len(answered)}, lost {len(lost)}, "
          f"rewritten after the client read them {len(rewritten)}")
    print(f"rewards that differ for the same completion: {len(inconsistent)} {inconsistent or ''}")
    impl_rewards = {k: sorted(v) for k, v in sorted(by_completion.items()) if not k.startswith("judge")}
    print(f"rewards per impl completion: {impl_rewards}")
    print(f"unscored (no reward): {sum(unscored.values())} {dict(unscored) or ''}")
    if ledger.submit_errors:
        print(f"submissions refused or failed: {dict(ledger.submit_errors)}")
    saturated = [t for at, t, status in ledger.numeric if status == 200 and at < ledger.first_fault_at]
    faulted = [t for at, t, status in ledger.numeric if status == 200 and at >= ledger.first_fault_at]
    errors = sum(1 for _, _, status in ledger.numeric if status != 200)
    print(f"numeric, quiet stack (no impl load): {_pcts(quiet)}")
    print(f"numeric, workers saturated, before the first fault: {_pcts(saturated)}")
    print(f"numeric, saturated, from the first fault on: {_pcts(faulted)}; not 200 (whole run): {errors}")
    if quiet and saturated:
        print(f"numeric p99 saturated / quiet: {percentile(saturated, 0.99) / percentile(quiet, 0.99):.1f}x")
    if ledger.backlog:
        depths = [d for _, d in ledger.backlog]
        print(f"impl backlog (jobs waiting in the queue): mean {sum(depths) / len(depths):.1f}, max {max(depths)}, "
              f"end {depths[-1]}")


def _report_impl_alone(alone: dict[str, Any], idle_rate: float) -> None:
    calls, answered = alone["calls"], alone["answered"]
    if not answered:
        print("redis, impl jobs alone: no job answered")
        return
    total = sum(calls.values())
    upkeep = idle_rate * alone["seconds"]
    print(f"redis, impl jobs alone ({alone['posting'] / 60:.1f} min of posts, {alone['seconds'] / 60:.1f} min to the "
          f"last answer; no numeric grades, judge items or faults; nothing taken out): {total} commands for "
          f"{answered} queued impl jobs answered {alone['kinds']} (of {alone['sent']} sent): "
          f"{total / answered:.1f} per job (target: at most 40); of them the idle stack's upkeep in that time "
          f"(its rate before the load): {upkeep / answered:.1f}, the rest {(total - upkeep) / answered:.1f}")
    busiest = sorted(calls.items(), key=lambda kv: -kv[1])[:14]
    print("  per queued job, by command: " + ", ".join(f"{name} {n / answered:.1f}" for name, n in busiest))


def _redis_per_job(span: str, calls: dict[str, int], ledger: Ledger, answered: list[str], start: dict,
                   window: tuple[float, float]) -> None:
    """Redis commands per queued job answered in ``window``: the calls counted in it, less each
    numeric grade's (measured on the quiet stack, its idle upkeep taken out)."""
    numerics = sum(1 for n in ledger.numeric if window[0] <= n[0] < window[1])
    queued = sum(1 for j in answered if window[0] <= ledger.answered_at.get(j, 0) < window[1])
    if not queued:
        return
    per_numeric = start.get("calls_per_numeric", {})
    per_job = {name: (n - per_numeric.get(name, 0.0) * numerics) / queued for name, n in calls.items()}
    numeric_cost = sum(per_numeric.get(name, 0.0) for name in calls) * numerics
    minutes = (window[1] - window[0]) / 60
    print(f"redis, {span} ({minutes:.1f} min): {sum(calls.values())} commands, of them about {numeric_cost:.0f} for "
          f"{numerics} numeric grades; about {sum(per_job.values()):.0f} per queued job answered in that time "
          f"({queued}), the lanes' beats and upkeep while they grade included")
    busiest = sorted(per_job.items(), key=lambda kv: -kv[1])[:12]
    print("  per queued job, by command: " + ", ".join(f"{name} {n:.1f}" for name, n in busiest))


def _verdict(body: dict) -> tuple:
    """(status, reward, outcome) of a job's view."""
    result = body.get("result") or {}
    return body.get("status"), result.get("reward"), result.get("outcome")


def final_results(soak: SoakStack, ledger: Ledger, wait_seconds: float) -> dict[str, dict]:
    """Every job's result as it stands after the load (waiting up to wait_seconds for the rest)."""
    headers = {"Authorization": f"Bearer {soak.api_key}"}
    final: dict[str, dict] = {}
    deadline = time.monotonic() + wait_seconds
    with httpx.Client(base_url=soak.url, headers=headers, timeout=30) as client:
        while time.monotonic() < deadline:
            for job_id in list(ledger.jobs):
                if job_id.startswith("inline-"):
                    final[job_id] = ledger.first_result[job_id]
                    continue
                with contextlib.suppress(httpx.HTTPError):
                    r = client.get(f"/v1/jobs/{job_id}", params={"wait": 0})
                    if r.status_code == 200 and r.json().get("status") in ("finished", "failed"):
                        final[job_id] = r.json()
                        _record(ledger, job_id, r.json())
            if len(final) == len(ledger.jobs):
                break
            time.sleep(3)
    return final


def judge_items() -> list:
    if not (os.environ.get("BOOK_MIRROR") or os.environ.get("SCALING_GRADER_BOOK_MIRROR")):
        return []
    from app.settings import Settings
    from app.tasks.book.bank import load_bank

    mirror = os.environ.get("BOOK_MIRROR") or os.environ["SCALING_GRADER_BOOK_MIRROR"]
    bank = load_bank(Settings(book_mirror=Path(mirror)))
    return [t for t in bank.tasks() if t.grading == "judge"][:8]


def main(smoke: bool) -> None:
    seconds = 180.0 if smoke else float(os.environ.get("STACK_SOAK_SECONDS", 3600))
    # Every 5 minutes, or often enough that a short run sees each of the four faults.
    fault_every = 30.0 if smoke else float(os.environ.get("STACK_SOAK_FAULT_EVERY", min(300.0, seconds / 5)))
    quiet_seconds = 15.0 if smoke else 60.0
    warmup = 20.0 if smoke else 120.0
    rate = float(os.environ.get("STACK_SOAK_NUMERIC_RATE", 20))
    soak, judge = start_stack(smoke)
    try:
        items = judge_items()
        print(f"judge items: {len(items)} book items against the loopback judge" if items
              else "judge items: none (no BOOK_MIRROR)")
        time.sleep(10)  # warm pools fill
        # What the idle stack costs Redis per second (the lanes' upkeep, the API's), then what a
        # numeric grade costs beyond it: taken out of the loaded run's count, the rest is the
        # queued jobs' (their lanes' beats and upkeep included: under the load no lane is idle)
        idle_seconds = 10.0 if smoke else 30.0
        idle_from = redis_facts(soak)
        time.sleep(idle_seconds)
        idle_rate = {name: calls / idle_seconds for name, calls in _calls(idle_from, redis_facts(soak)).items()}
        before, quiet_began = redis_facts(soak), time.monotonic()
        quiet = measure_numeric(soak, quiet_seconds, rate)
        after, quiet_took = redis_facts(soak), time.monotonic() - quiet_began
        grades = max(1, len(quiet))
        calls_per_numeric = {name: max(0.0, calls - idle_rate.get(name, 0.0) * quiet_took) / grades
                             for name, calls in _calls(before, after).items()}
        alone = impl_alone(soak, float(os.environ.get("STACK_SOAK_IMPL_ALONE_SECONDS", 30 if smoke else 240)))
        ledger, stop = Ledger(), threading.Event()
        threads = [
            threading.Thread(target=numeric_load, args=(soak, ledger, stop, rate, 30.0), daemon=True),
            *(threading.Thread(target=rollout_worker, args=(soak, ledger, stop, i, items), daemon=True)
              for i in range(ROLLOUT_WORKERS)),
            threading.Thread(target=sample_backlog, args=(soak, ledger, stop), daemon=True),
            threading.Thread(target=sample_containers, args=(soak, ledger, stop, 10.0 if smoke else 60.0),
                             daemon=True),
        ]
        for t in threads:
            t.start()
        # The start of the comparison: after a warm-up under the load (pools full, queues busy).
        time.sleep(warmup)
        start = snapshot(soak)
        start["idle_rate"] = idle_rate
        start["calls_per_numeric"] = calls_per_numeric
        start["impl_alone"] = alone
        began, faults, rng, n = time.monotonic(), [], random.Random(3), 0
        redis_before_faults: dict[str, int] = {}
        while time.monotonic() - began < seconds:
            time.sleep(min(fault_every, max(0.0, seconds - (time.monotonic() - began))))
            if time.monotonic() - began >= seconds - 10:
                break
            fault = FAULTS[n % len(FAULTS)]
            n += 1
            if n == 1:
                ledger.first_fault_at = time.monotonic()
                redis_before_faults = redis_facts(soak)
            at = time.monotonic() - began
            try:
                faults.append(f"{at / 60:.1f} min: {fault(soak, rng)}")
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                faults.append(f"{at / 60:.1f} min: {fault.__name__} failed: {str(exc)[:200]}")
        stop.set()
        for t in threads:
            t.join(timeout=120)
        loaded_seconds = time.monotonic() - began
        loaded_end = {"redis": redis_facts(soak), "at": time.monotonic()}
        final = final_results(soak, ledger, 300.0)
        time.sleep(5)
        end = snapshot(soak)
        end["redis_before_faults"] = redis_before_faults
        end["first_fault_at"] = ledger.first_fault_at
        end["loaded"] = loaded_end
        end["redis_lives"] = soak.redis_lives
        report(start, end, ledger, final, quiet, faults, loaded_seconds, warmup)
    finally:
        judge.kill()
        judge.wait()
        if os.environ.get("KEEP_STACK") != "1":
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                soak.stack("down", timeout=600)


if __name__ == "__main__":
    main(smoke="--smoke" in sys.argv)
