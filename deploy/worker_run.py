"""Translate the worker service of `docker-compose config` (YAML on stdin) into `docker run`
arguments, one per line, for one worker container.

Why: Debian's docker-compose (1.29) cannot express `security_opt: systempaths=unconfined` (the
Docker CLI and Compose v2 turn it into empty masked/read-only path lists; the Engine API refuses
it as a raw option), and bubblewrap needs it inside the worker (see docker-compose.yml). So with
Compose v1, deploy/stack.sh starts workers with `docker run` from the compose file's own settings,
labelled as the project's worker service so `down` removes them. Every key of the service must
be translated or known to be irrelevant: an unknown key is an error, so no hardening option can be
dropped silently.

    docker-compose config | python3 deploy/worker_run.py PROJECT NUMBER
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]  # the compose file's directory

IGNORED = {"build", "depends_on", "healthcheck"}  # built already; started after redis; image's own


def _env(value: object) -> list[str]:
    if isinstance(value, dict):
        return [f"{k}={'' if v is None else v}" for k, v in value.items()]
    return [str(v) for v in value or []]


def _volume(spec: str, project: str, named: set[str]) -> str:
    source, _, rest = spec.partition(":")
    if source in named:  # a named volume of the project
        source = f"{project}_{source}"
    return f"{source}:{rest}"


def security_opt(opt: str) -> str:
    """One security option for the CLI. Compose v1 writes a seccomp profile as seccomp:PATH, PATH as
    the compose file gives it; the CLI reads the profile itself, relative to its working directory,
    so a relative PATH is made absolute against the compose file's directory (as Compose v2 does)."""
    name, sep, value = opt.partition("=") if opt.startswith("seccomp=") else opt.partition(":")
    if name != "seccomp" or not sep:
        return opt
    if value != "unconfined" and not Path(value).is_absolute():
        value = str(ROOT / value)
    return f"seccomp={value}"


def duration_seconds(text: str) -> int:
    """Compose's duration ("180s", "3m", "1m30s", "90") in whole seconds, rounded up."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?", text)
    if text.isdigit():
        return int(text)
    if not text or match is None:
        raise SystemExit(f"worker_run.py: cannot read the duration {text!r}")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return math.ceil(hours * 3600 + minutes * 60 + seconds)


def run_args(config: dict, project: str, number: int) -> list[str]:
    svc = config["services"]["worker"]
    named = set(config.get("volumes") or {})
    args = [
        "--detach", "--name", f"{project}_worker_{number}",
        "--network", f"{project}_default", "--network-alias", "worker",
        "--label", f"com.docker.compose.project={project}",
        "--label", "com.docker.compose.service=worker",
        "--label", "com.docker.compose.oneoff=False",
        "--label", f"com.docker.compose.container-number={number}",
    ]
    for key, value in svc.items():
        if key in IGNORED or key == "image" or key == "command":
            continue
        if key == "environment":
            for item in _env(value):
                args += ["--env", item]
        elif key == "volumes":
            for spec in value:
                args += ["--volume", _volume(spec, project, named)]
        elif key == "tmpfs":
            for spec in [value] if isinstance(value, str) else value:
                args += ["--tmpfs", spec]
        elif key == "cap_drop":
            args += [a for cap in value for a in ("--cap-drop", cap)]
        elif key == "cap_add":
            args += [a for cap in value for a in ("--cap-add", cap)]
        elif key == "security_opt":
            # the worker's own seccomp profile (deploy/worker-seccomp.json) among them
            args += [a for opt in value for a in ("--security-opt", security_opt(opt))]
        elif key == "read_only":
            args += ["--read-only"] if value else []
        elif key == "user":
            args += ["--user", str(value)]
        elif key == "pids_limit":
            args += ["--pids-limit", str(value)]
        elif key == "mem_limit":
            args += ["--memory", str(value)]
        elif key == "cpus":  # the CPU quota, which sets the worker's lanes (jobs at once)
            args += ["--cpus", str(value)]
        elif key == "cpuset":  # the CPUs, which set the worker's lanes too
            args += ["--cpuset-cpus", str(value)]
        elif key == "restart":
            args += ["--restart", str(value)]
        elif key == "init":  # an init as pid 1 that reaps orphans (docker-compose.yml says why)
            args += ["--init"] if value else []
        elif key == "cpu_shares":  # the worker's CPU weight, below the API's
            args += ["--cpu-shares", str(value)]
        elif key == "stop_signal":
            args += ["--stop-signal", str(value)]
        elif key == "stop_grace_period":  # a warm stop's time to finish the job it holds
            args += ["--stop-timeout", str(duration_seconds(str(value)))]
        else:
            raise SystemExit(f"worker_run.py: no translation for the worker option {key!r}")
    args.append(svc["image"])
    command = svc.get("command")
    if command:
        args += command if isinstance(command, list) else ["sh", "-c", command]
    return args


if __name__ == "__main__":
    print("\n".join(run_args(yaml.safe_load(sys.stdin), sys.argv[1], int(sys.argv[2]))))
