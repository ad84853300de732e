"""Per-case latency of the warm sandbox pool against a cold ``python -I`` child that imports JAX
for every case (the baseline, measured in the same run), and sustained throughput.

The case is the reference ``kv_cache_bytes`` solution: the work is trivial, so the figures are the
sandbox's own overhead. Warm latency is measured with a warm child available (the pool is
allowed to refill between cases); throughput runs cases back to back, two at a time, so the
refill cost is included."""

from __future__ import annotations

import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from app.sandbox import get_sandbox
from app.settings import SandboxSettings
from app.tasks.impl import reference

ARGS = [8, 8192, 80, 8, 128, 2]


def _cold_case(source: str) -> float:
    """One case the naive way: a fresh interpreter that imports JAX, runs the function, prints."""
    program = (
        "import jax, jax.numpy, json, sys\n" + source
        + f"\nprint(json.dumps(kv_cache_bytes(*{ARGS!r})))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, env=env,
                             cwd=cwd, check=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert int(out.stdout) == reference.kv_cache_bytes(*ARGS)
    return elapsed


def main(smoke: bool = False) -> None:
    source = inspect.getsource(reference.kv_cache_bytes)
    expected = reference.kv_cache_bytes(*ARGS)
    n_latency = 3 if smoke else 15
    n_throughput = 4 if smoke else 40
    sb = SandboxSettings(warm_pool_size=2)
    box = get_sandbox(sb)
    tier = box.tier().name
    print(f"   machine: {os.cpu_count()} CPUs; sandbox tier: {tier}")

    cold = [_cold_case(source) for _ in range(n_latency)]

    warm = []
    for _ in range(n_latency):
        box.prewarm("jax")
        start = time.perf_counter()
        run = box.run(source, "kv_cache_bytes", ARGS, profile="jax")
        warm.append(time.perf_counter() - start)
        value = ((run.final or {}).get("result") or {}).get("value")
        assert run.status == "finished" and value == expected, (run.status, run.fault)

    cold_median, warm_median = statistics.median(cold), statistics.median(warm)
    ratio = cold_median / warm_median
    print(f"   cold python -I + import jax per case: median {cold_median * 1000:.0f} ms over {n_latency}")
    print(f"   warm pool ({tier}, jax preloaded): median {warm_median * 1000:.1f} ms over {n_latency}")
    verdict = "meets" if ratio >= 8 else "MISSES"
    print(f"   warm pool is {ratio:.1f}x faster at the median ({verdict} the 8x target)")

    for profile in ("jax", "numpy"):
        box.prewarm(profile)
        start = time.perf_counter()
        with ThreadPoolExecutor(sb.max_parallel_cases) as pool:
            runs = list(pool.map(lambda _, p=profile: box.run(source, "kv_cache_bytes", ARGS, profile=p),
                                 range(n_throughput)))
        elapsed = time.perf_counter() - start
        ok = sum(r.status == "finished" for r in runs)
        print(f"   throughput, {profile} profile, {sb.max_parallel_cases} at a time: "
              f"{n_throughput / elapsed:.1f} cases/s ({ok}/{n_throughput} finished, refills included)")


if __name__ == "__main__":
    main(smoke="--smoke" in sys.argv)
