"""A worker container's CPU limits reach `docker run` under Compose v1 too: they set how many jobs
the worker runs at once (its lanes: the cores it is given), so dropping them would not fail
loudly, it would make one container take every core of the host."""

from __future__ import annotations

import itertools

from deploy.worker_run import run_args
from tests.deploy.compose_files import interpolated


def test_cpu_limits_are_translated() -> None:
    compose = interpolated()  # as `docker-compose config` prints it: variables replaced
    service = {k: v for k, v in compose["services"]["worker"].items() if k != "env_file"}
    config = {"services": {"worker": {**service, "cpus": 4.0, "cpuset": "0-3"}}, "volumes": compose["volumes"]}
    pairs = set(itertools.pairwise(run_args(config, "proj", 1)))
    assert {("--cpus", "4.0"), ("--cpuset-cpus", "0-3")} <= pairs
