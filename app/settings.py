"""The one Settings object. Environment variables use the prefix ``SCALING_GRADER_``;
nested groups use ``__`` (``SCALING_GRADER_LIMITS__MAX_GRADES_PER_BATCH=256``).

Settings fail loudly: a misspelt variable (``SCALING_GRADER_LIMITS__MAX_BATCH``) would otherwise be
ignored and the operator would run with a default they believe they changed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.cpus import cores_given

CASES_PER_CORE = 4  # the default MAX_CONCURRENT_CASES per core


class Tolerances(BaseModel):
    """Operators' overrides of default relative tolerances; a request may override them for inline
    references only. A split's own default lives in its SplitSpec (app/tasks/splits.py), which
    names the field here that overrides it, if any: None keeps the spec's default."""

    model_config = ConfigDict(extra="forbid")

    synthetic: float | None = Field(None, gt=0, lt=1)
    synthetic_v2: float | None = Field(None, gt=0, lt=1)
    book: float | None = Field(None, gt=0, lt=1)
    exam: float | None = Field(None, gt=0, lt=1)
    # Rows grading: the ``tasks`` split and inline rows references.
    rows: float = Field(1e-9, gt=0, lt=1)
    # Inline numeric references (OpenRLHF labels, verl ground truths) that carry no tolerance.
    inline: float = Field(0.02, gt=0, lt=1)


# Bytes a batch item may add around its completion (a task id or label, an OpenRLHF prompt given
# twice), and the most any batch body may hold whatever the limits say.
BATCH_ITEM_ENVELOPE_BYTES = 16 * 1024
BATCH_BODY_HARD_CAP = 256 * 1024 * 1024


class Limits(BaseModel):
    """Request-size bounds: large enough for long reasoning traces, small enough that one client
    cannot exhaust the API's memory."""

    model_config = ConfigDict(extra="forbid")

    max_completion_chars: int = Field(200_000, gt=0)
    max_request_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_tasks_per_request: int = Field(1024, gt=0)
    max_grades_per_batch: int = Field(512, gt=0)
    max_wait_seconds: float = Field(60.0, ge=0)
    # Body limit of the batch and reward routes; None: derived (see ``batch_request_bytes``).
    max_batch_request_bytes: int | None = Field(None, gt=0, le=BATCH_BODY_HARD_CAP)
    # A body must arrive within body_grace_seconds plus its length at body_min_bytes_per_second
    # (408 past that): a client that stalls mid-upload cannot hold its memory or a large-body slot.
    body_grace_seconds: float = Field(15.0, gt=0)
    body_min_bytes_per_second: int = Field(512 * 1024, gt=0)
    # A request's line and headers: at most max_header_bytes (431), arrived within header_seconds
    # of the connection or of the request's first byte (408); see app/api/http_limits.py.
    max_header_bytes: int = Field(64 * 1024, ge=8 * 1024)
    header_seconds: float = Field(15.0, gt=0)

    @property
    def batch_request_bytes(self) -> int:
        """A batch of max_grades_per_batch completions of max_completion_chars (ASCII) each, plus
        an envelope per item (its task id or label, a prompt), is never refused for its size: an
        over-long answer is scored too_long, not turned into a 413 for the whole batch. Capped, so a
        hostile body cannot take more than BATCH_BODY_HARD_CAP of memory."""
        if self.max_batch_request_bytes is not None:
            return max(self.max_batch_request_bytes, self.max_request_bytes)
        derived = self.max_grades_per_batch * (self.max_completion_chars + BATCH_ITEM_ENVELOPE_BYTES)
        return max(self.max_request_bytes, min(derived, BATCH_BODY_HARD_CAP))


class HeldOutSettings(BaseModel):
    """Splits held out for evaluation: grades of their items are budgeted per tenant and item,
    and results carry no per-value verdicts (docs/splits.md gives the arithmetic of the default)."""

    model_config = ConfigDict(extra="forbid")

    # None: the splits whose SplitSpec says held out (the exam).
    splits: list[str] | None = None
    # Grades one tenant may spend on one item per window (a tenant's own setting overrides it).
    grades_per_item: int = Field(64, gt=0)
    window_seconds: int = Field(7 * 24 * 3600, gt=0)


class QueueSettings(BaseModel):
    """Queued grading (judge, impl). Heartbeats and maintenance are seconds, not RQ's minutes, so
    a job held by a worker that died is retried quickly."""

    model_config = ConfigDict(extra="forbid")

    default_wait: float = Field(30.0, ge=0, description="seconds a grade request blocks for queued work")
    result_ttl: int = Field(3600, gt=0, description="seconds results and idempotency keys are kept")
    job_timeout: int = Field(900, gt=0, description="backstop deadline of one grading job")
    retries: int = Field(2, ge=0, description="re-runs of a job whose worker died or that failed")
    # A beat costs 1 Redis command (worker.grading_worker): every 5 s, a busy lane's beats cost
    # Redis 0.2 commands a second. A lane is taken for dead interval + grace (15 s) after its last
    # beat; the grace outlasts a missed beat, and is far above the heartbeat thread's measured
    # lateness on a saturated machine (4 ms in the latest recorded run, 133 ms in an earlier one:
    # bench_redis_commands): only a stopped or cut-off worker misses it.
    heartbeat_interval: float = Field(5.0, gt=0, description="seconds between a busy lane's heartbeats")
    heartbeat_grace: int = Field(10, gt=0, description="missed-heartbeat seconds before a job is abandoned")
    # 10 s: each look is a command a queue and a claim of the maintenance key by every lane (at 5 s
    # they were about 2 of the 40 Redis commands per queued impl job the stack soak counted); a dead
    # lane's job goes back within heartbeat interval + grace + this, about 25 s
    maintenance_interval: int = Field(10, gt=0, description="how often one worker looks for abandoned jobs")
    embedded_threads: int = Field(4, gt=0, description="embedded mode: threads grading queued kinds")
    # Embedded mode keeps idempotency records and results in memory: the oldest finished ones go
    # first past this many (Redis mode bounds them by result_ttl and the tenants' grade rates).
    max_kept_jobs: int = Field(10_000, gt=0, description="embedded mode: job records kept in memory per tenant")
    # ...and in bytes: results are kept as compressed JSON, counted by their stored size.
    max_kept_bytes_per_tenant: int = Field(32 * 1024 * 1024, gt=0,
                                           description="embedded mode: stored result bytes per tenant")
    max_kept_bytes: int = Field(256 * 1024 * 1024, gt=0, description="embedded mode: stored result bytes in all")
    # Jobs one `scaling-grader worker` process runs at once (its lanes, sharing one sandbox);
    # 0: the cores the process is given (affinity, cgroup CPU quota), so that one worker per
    # machine or container keeps every core busy.
    worker_jobs: int = Field(0, ge=0, description="jobs one worker process runs at once; 0: its cores")
    # How an API request waits for a queued result: "notify" (woken by the worker's announcement,
    # a few commands per job) or "poll" (a GET every 100 ms; kept to measure against).
    result_wait: Literal["notify", "poll"] = "notify"

    @property
    def worker_lanes(self) -> int:
        """WORKER_JOBS in force (0 resolved to the cores this process is given)."""
        return self.worker_jobs or cores_given()


class JudgeSettings(BaseModel):
    """The judge model endpoint(s) an operator allows. A request may name a model and one of the
    allowed base URLs; it can never supply a key or an address outside the allow-list."""

    model_config = ConfigDict(extra="forbid")

    # Exact base URLs (scheme, host, port, path) requests may use; anything else is refused.
    allowed_base_urls: list[str] = Field(default_factory=list)
    default_model: str | None = None
    default_base_url: str | None = None
    # NAME of the environment variable holding the API key (the key itself never lives in settings).
    # None: keyless local endpoints (vLLM, SGLang) get a placeholder key.
    api_key_env: str | None = None
    timeout_seconds: float = Field(30.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)  # extra attempts after rate limits, time-outs, 5xx
    backoff_seconds: float = Field(1.0, ge=0)  # first retry wait; doubles each time
    max_backoff_seconds: float = Field(20.0, ge=0)
    max_tokens: int = Field(256, gt=0, le=4096)
    # Longest candidate response shown to the judge (its head and tail are kept).
    max_response_chars: int = Field(8000, gt=0)
    # How the judge is asked for its verdict: a constrained answer where the endpoint supports one
    # (`scaling-grader judge-check` probes which): vLLM-style guided choice, a JSON-schema
    # response_format, or yes/no log-probabilities; "none" reads a free-text reply strictly.
    constraint: Literal["none", "guided_choice", "json_schema", "logprobs"] = "none"
    # A verdict of correct is asked for once more, with the same two words' meanings swapped (each
    # named where it stood, the allowed values listed as before, the same fence), and the response
    # earns its reward only when both say correct: a response that steers the judge to a word by
    # anything but its meaning (its place, its spelling, "the first allowed value") lands on the
    # same word twice and never earns it. Costs a second call for each correct verdict (none for
    # the others).
    confirm_correct: bool = True


# The sandbox's isolation tiers, weakest first: the values SANDBOX__TIER and MIN_TIER accept, and
# how MIN_TIER ranks them. Each is the module of that name in app/sandbox/tiers/: adding a tier is
# that module and its place here.
TIER_ORDER: tuple[str, ...] = ("plain", "bubblewrap", "gvisor")


class SandboxSettings(BaseModel):
    """Isolation and limits for impl grading (app/sandbox). Tests shorten the limits."""

    model_config = ConfigDict(extra="forbid")

    # "auto" probes bubblewrap, then a plain child, and uses the strongest that really runs;
    # "gvisor" (a user-space kernel per case, runsc, root only) is used only when named here.
    tier: str = "auto"  # "auto" or one of TIER_ORDER
    # "auto": apply the seccomp deny-list when libseccomp loads; "require": fail closed without it.
    seccomp: Literal["auto", "require", "off"] = "auto"
    # The weakest isolation this deployment accepts (plain < bubblewrap < gvisor). A process whose
    # strongest working tier is weaker refuses impl grades (sandbox_error, code not run): never a
    # silent downgrade.
    min_tier: str = TIER_ORDER[0]  # one of TIER_ORDER
    # How gVisor's kernel intercepts the case's system calls: "ptrace" works everywhere (nested
    # virtual machines included); "kvm" is faster on bare metal with /dev/kvm.
    gvisor_platform: Literal["ptrace", "kvm"] = "ptrace"
    python: Path | None = None  # interpreter for children; default: the one running the service
    packages: tuple[str, ...] = ("numpy", "jax")  # made importable in the child, with their deps
    wall_seconds: float = Field(15.0, gt=0)
    cpu_seconds: float = Field(10.0, gt=0)
    address_space_bytes: int = Field(2 * 1024**3, gt=0)  # beyond what the warm child holds
    max_processes: int = Field(32, gt=0)
    max_open_files: int = Field(64, gt=0)
    max_file_bytes: int = Field(16 * 1024**2, gt=0)
    tmpfs_bytes: int = Field(64 * 1024**2, gt=0)  # bubblewrap and gvisor tiers: size of the private /tmp
    max_output_bytes: int = Field(1024**2, gt=0)  # stdout + stderr per case; more is a verdict
    # A returned value, as canonical JSON; kept small so that reading the largest result costs the
    # service milliseconds (answers are a few hundred numbers at most).
    max_result_bytes: int = Field(64 * 1024, gt=0)
    max_result_items: int = Field(10_000, gt=0)
    # Where the sandbox writes its start record (app/sandbox/health.py) for a health check run
    # outside the process, e.g. the worker container's; None: kept in memory only.
    health_file: Path | None = None
    host_devices: int = Field(8, gt=0)  # CPU devices JAX sees in the child
    warm_pool_size: int = Field(2, ge=0)  # per preload profile
    start_timeout_seconds: float = Field(60.0, gt=0)
    # Cases of one submission run side by side; 0: twice the CPUs this process may use, so that
    # one worker grading one submission keeps every core it is given busy (a case also spends
    # time waiting on its set-up, its result and its clean-up in the service).
    max_parallel_cases: int = Field(0, ge=0)
    # Cases running at once in this process, all grades (all of a worker's lanes) together;
    # 0: four per core this process is given (8 on 2 cores), room for each lane's cases to
    # overlap their set-up and clean-up with other cases' work.
    max_concurrent_cases: int = Field(0, ge=0)
    # Dedicated uids (one per live child) when the service runs as root.
    uid_base: int = Field(610_000, gt=1000)
    uid_count: int = Field(4096, gt=0)
    python_guards: bool = True  # audit-hook guard inside the child (defence in depth)
    ast_guard: bool = True  # reject submissions importing obviously forbidden modules
    shm_bytes: int = Field(16 * 1024**2, gt=0)  # bubblewrap and gvisor tiers: size of the private /dev/shm
    # Limits for a case as a whole (all its processes, tmpfs pages included), by a control group
    # per case when the service is root and the host's cgroups are writable; "off" keeps rlimits only.
    cgroups: Literal["auto", "off"] = "auto"
    # Cases in a CPU group marked idle (cpu.idle; needs those cgroups and Linux 5.15): they run
    # only on CPU nothing else beside them wants, so inline grading on the same host keeps its
    # latency while every case slot is busy. Off by default: on a host whose other work fills
    # the CPU (a test run, a desktop) the cases would wait, and their wall-clock limit runs on.
    # For workers run outside containers: inside them cgroups are read-only, and the worker
    # containers' lowest CPU weight does this instead (docker-compose.yml).
    idle_cpu: bool = False
    case_memory_bytes: int = Field(2 * 1024**3, gt=0)  # beyond what the warm child holds
    # (CPU_SECONDS then also bounds the CPU time of all the case's processes together.)
    warm_memory_bytes: int = Field(4 * 1024**3, gt=0)  # a warming child (no candidate code yet)
    warm_max_tasks: int = Field(512, gt=0)
    # The plain tier (no namespaces) is refused at start for a multi-tenant service (tenants
    # file set) unless this is true: its isolation is a uid, rlimits and seccomp only.
    allow_plain: bool = False
    # How a case's child comes to be: "forkserver" forks it from a process per profile that has
    # imported numpy/JAX once (used where it keeps every guarantee, see the sandbox docs; elsewhere
    # interpreters are started as with "exec"); "exec" starts a fresh interpreter per case.
    launcher: Literal["forkserver", "exec"] = "forkserver"

    @field_validator("tier", "min_tier")
    @classmethod
    def _known_tier(cls, name: str, info: ValidationInfo) -> str:
        allowed = (*(("auto",) if info.field_name == "tier" else ()), *TIER_ORDER)
        if name not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return name

    @model_validator(mode="after")
    def _resolve_case_cap(self) -> SandboxSettings:
        # Resolved here, not where it is used: the sandbox sizes its semaphore from the field.
        if self.max_concurrent_cases == 0:
            self.max_concurrent_cases = CASES_PER_CORE * cores_given()
        return self

    @property
    def parallel_cases(self) -> int:
        """MAX_PARALLEL_CASES in force (0 resolved to twice the CPUs this process is given)."""
        return self.max_parallel_cases or 2 * cores_given()


class ImplSettings(BaseModel):
    """Hidden cases of the impl split. Each grade draws fresh cases from a seed derived (HMAC)
    from this secret and the request. Unset: a random secret per process, so cases cannot be
    predicted, but a grade can be replayed only in the process that made it; set it (the same on
    every worker) to replay grades later with ``scaling-grader impl replay``."""

    model_config = ConfigDict(extra="forbid")

    case_secret: SecretStr | None = None


ENV_PREFIX = "SCALING_GRADER_"
# Read by the client and the trainer adapters, not by the service; allowed beside its settings.
CLIENT_VARIABLES = frozenset({"SCALING_GRADER_URL", "SCALING_GRADER_API_KEY",
                              # the OpenRLHF reward function file's client settings
                              "SCALING_GRADER_TIMEOUT", "SCALING_GRADER_DEADLINE", "SCALING_GRADER_HEADERS"})


class UnknownSettingError(ValueError):
    """A ``SCALING_GRADER_*`` variable names no setting."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Absent means the embedded default: queued kinds are graded in-process.
    redis_url: str | None = None
    # TOML listing tenants and their hashed keys; absent = single user, loopback only.
    tenants_file: Path | None = None
    # Host names browsers may reach this service under, besides the loopback names and the bind
    # address (DNS-rebinding defence; see docs/api.md, "Browsers"). A JSON list.
    allowed_hosts: list[str] = []
    queue: QueueSettings = QueueSettings()
    tolerances: Tolerances = Tolerances()
    limits: Limits = Limits()
    sandbox: SandboxSettings = SandboxSettings()
    impl: ImplSettings = ImplSettings()
    # Where verified copies of the pinned book chapters are kept, and an optional offline mirror.
    book_cache: Path = Path.home() / ".cache" / "scaling-grader" / "book"
    book_mirror: Path | None = None
    # Raw-file host of the pinned commit; tests point it at a loopback server.
    book_base_url: str = "https://raw.githubusercontent.com/jax-ml/scaling-book"
    book_download_timeout: float = Field(30.0, gt=0)
    judge: JudgeSettings = JudgeSettings()
    held_out: HeldOutSettings = HeldOutSettings()
    # Processes of the API that grade large inline items and batches and parse large bodies
    # (app/grading/processes.py): at most this many such calls run at once, in turn by tenant.
    grading_processes: int = Field(2, ge=1, le=64)
    # Show expected values in responses to task-id grades when no tenants file is used (tenants
    # have their own `reveal_expected`). Off: a policy that reads its grade must not read the gold.
    reveal_expected: bool = False
    # Modules that register splits and grading kinds, comma-separated import paths: read from the
    # environment by app/extensions.py at every process's start (a lane's included), before these
    # settings are; named here so that it is a known variable.
    extensions: str = ""

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url


def _variable_names(model: type[BaseModel], prefix: str) -> set[str]:
    names: set[str] = set()
    for field_name, field in model.model_fields.items():
        name = prefix + field_name.upper()
        names.add(name)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= _variable_names(annotation, name + "__")
    return names


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``SCALING_GRADER_*`` variables in ``environ`` that name no setting (sorted)."""
    known = _variable_names(Settings, ENV_PREFIX) | CLIENT_VARIABLES
    return sorted(k for k in environ if k.upper().startswith(ENV_PREFIX) and k.upper() not in known)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start with a misspelt or unknown variable, naming it (never its value)."""
    unknown = unknown_variables(os.environ if environ is None else environ)
    if unknown:
        raise UnknownSettingError(
            "unknown setting(s): " + ", ".join(unknown) + "; see docs/configuration.md for the names"
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, from the environment; unknown variables are an error."""
    check_environment()
    return Settings()
