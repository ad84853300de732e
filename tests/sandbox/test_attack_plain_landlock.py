"""Attacks on the plain tier's files, kept as tests: a plain case has no mount namespace, so what it
may open of the host is what Landlock allows it (tiers/plain.py, child/landlock.py): the
interpreter's prefix, the configured packages' own site-packages entries, the system libraries,
/proc read-only, /dev/null and its like, and its own working, home and temporary directories.

A reviewer found that a plain case read the service's source, and earned full reward by importing
the exercises' reference solutions (tests/graders/test_attack_fresh_reward.py). Here every way to
that source a case has is tried, in every plain tier this machine offers (started and forked, with
and without the seccomp deny-list, the Python guards off): open, list, import, an O_PATH descriptor
reopened, symlinks in the case's directories and in the host's /tmp, a hard link, /proc/self/root,
the service's /proc/<pid>/cwd, a script executed, a rename. Each must fail, and the content of the
target (read here, by the test) must not come back. Then writes outside the case's directories, and
honest cases: the case's own directories work, and every exercise's reference solution (numpy and
JAX profiles) passes every hidden case.

Where the kernel offers no Landlock (or a seccomp filter of the host's refuses it), the plain tier
runs as before and says so: the last tests run a whole service under such a filter."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import app
from app.graders.impl import grade_source
from app.graders.impl_cases import random_case_seed
from app.sandbox.child.landlock import FS_READ_DIR, handled_access, kernel_abi, rule_access
from app.settings import Settings
from app.tasks.impl import reference
from app.tasks.impl.exercises import ALL
from tests.sandbox.attacks import code
from tests.sandbox.isolation_support import hostile, observed
from tests.sandbox.tiers import LANDLOCK, LaunchedTier, box_for, launched_tiers, tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SERVICE_ROOT = Path(app.__file__).resolve().parents[1]
TARGET = SERVICE_ROOT / "app" / "tasks" / "impl" / "reference.py"  # the oracle a thief would import
MARKER = TARGET.read_text()[:400]  # what must not come back from a case
ABI = kernel_abi()[0]


def plain_tiers() -> list[LaunchedTier]:
    return [t for t in launched_tiers() if t.startswith("plain")]


def _needs_landlock() -> None:
    if not LANDLOCK:
        pytest.skip(f"this kernel offers no Landlock ({kernel_abi()[1]}): the plain tier runs as before")


# Each returns 'denied:<error>' when the sandbox stops it, or what it got.
WAYS_TO_THE_SOURCE = {
    "open": """
        return open(target).read()
        """,
    "listdir": """
        return os.listdir(os.path.dirname(target))
        """,
    "import": """
        import importlib
        sys.path.insert(0, root)
        module = importlib.import_module('app.tasks.impl.reference')
        return inspect.getsource(module)
        """,
    "import_from_file": """
        import importlib.util
        spec = importlib.util.spec_from_file_location('stolen', target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return [name for name in dir(module) if not name.startswith('_')]
        """,
    "o_path_reopened": """
        fd = os.open(target, os.O_PATH)  # Landlock does not check O_PATH: the reopening is checked
        got = []
        for attempt in (lambda: os.read(fd, 4096),
                        lambda: open(f'/proc/self/fd/{fd}').read(),
                        lambda: open(os.open('reference.py', os.O_RDONLY,
                                             dir_fd=os.open(os.path.dirname(target), os.O_PATH))).read()):
            try:
                got.append(attempt())
            except OSError as e:
                got.append('denied:' + type(e).__name__)
        return got if any(not str(g).startswith('denied') for g in got) else 'denied:' + ','.join(got)
        """,
    "symlink_in_case_tmp": """
        link = os.path.join(os.environ['TMPDIR'], 'link')
        os.symlink(target, link)  # allowed: the link is the case's own
        return open(link).read()
        """,
    "symlink_in_case_cwd": """
        os.symlink(os.path.dirname(target), 'tree')
        return open(os.path.join('tree', 'reference.py')).read()
        """,
    "symlink_in_host_tmp": """
        link = f'/tmp/plain-link-{os.getpid()}'
        os.symlink(target, link)
        try:
            return open(link).read()
        finally:
            os.unlink(link)
        """,
    "hard_link": """
        link = os.path.join(os.environ['TMPDIR'], 'hard')
        os.link(target, link)
        return open(link).read()
        """,
    "proc_self_root": """
        return open('/proc/self/root' + target).read()
        """,
    "proc_service_cwd": """
        return open(f'/proc/{service_pid}/cwd/{relative}').read()
        """,
    "proc_service_root": """
        return open(f'/proc/{service_pid}/root{target}').read()
        """,
    "exec_a_script": """
        import subprocess
        script = os.path.join(os.environ['TMPDIR'], 'steal')
        with open(script, 'w') as f:
            f.write(f'#!{sys.executable} -I\\nprint(open({target!r}).read())\\n')
        os.chmod(script, 0o755)
        done = subprocess.run([script], capture_output=True, timeout=20)
        out = done.stdout.decode()
        if out.strip():
            return out
        return 'denied:' + ('PermissionError' if b'PermissionError' in done.stderr else done.stderr.decode()[-300:])
        """,
    "exec_the_interpreter_on_it": """
        import subprocess
        done = subprocess.run([sys.executable, '-I', '-c', f'print(open({target!r}).read())'],
                              capture_output=True, timeout=20)
        out = done.stdout.decode()
        if out.strip():
            return out
        return 'denied:' + ('PermissionError' if b'PermissionError' in done.stderr else done.stderr.decode()[-300:])
        """,
    "rename_the_tree_into_the_case": """
        os.rename(os.path.dirname(target), os.path.join(os.environ['TMPDIR'], 'impl'))
        return open(os.path.join(os.environ['TMPDIR'], 'impl', 'reference.py')).read()
        """,
}


# What each way meets: the kernel's refusal (EACCES), or an import system that finds nothing where
# it may list nothing; an O_PATH descriptor cannot be read (EBADF) and cannot be reopened.
EXPECTED = dict.fromkeys(WAYS_TO_THE_SOURCE, "denied:PermissionError") | {
    "import": "denied:ModuleNotFoundError",
    "o_path_reopened": "denied:denied:OSError,denied:PermissionError,denied:PermissionError",
}


def _attack(body: str) -> str:
    inner = textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
    return ("import inspect, os, sys\n"
            "def attack(target, root, service_pid, relative):\n    try:\n"
            f"{inner}\n    except BaseException as e:\n        return 'denied:' + type(e).__name__\n")


def _relative_to_service_cwd() -> str:
    try:
        return str(TARGET.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(TARGET).lstrip("/")  # (the service's cwd is not above the tree: / then)


@pytest.mark.parametrize("way", sorted(WAYS_TO_THE_SOURCE))
@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_cannot_reach_the_service_source(tier: LaunchedTier, way: str) -> None:
    _needs_landlock()
    assert TARGET.stat().st_mode & 0o004  # world-readable: only Landlock stands in the way
    args = [str(TARGET), str(SERVICE_ROOT), os.getpid(), _relative_to_service_cwd()]
    run, _ = hostile(box_for(tier, guards=False), _attack(WAYS_TO_THE_SOURCE[way]), args)
    got = observed(run)
    assert got == EXPECTED[way], (way, got, run.status, run.fault)
    assert MARKER[:60] not in json.dumps(got)
    assert (run.armed or {}).get("landlock") == {"abi": ABI}, run.armed
    assert not os.path.lexists(f"/tmp/plain-link-{os.getpid()}")
    assert TARGET.exists()  # not renamed away


WRITES_OUTSIDE = code("""
    import os
    def attack(service_dir):
        out = {}
        tag = 'plain-%d' % os.getpid()
        attempts = {
            'file in /tmp': lambda: open(f'/tmp/{tag}', 'w').close(),
            'file in /var/tmp': lambda: open(f'/var/tmp/{tag}', 'w').close(),
            'file in /dev/shm': lambda: open(f'/dev/shm/{tag}', 'w').close(),
            'directory in /tmp': lambda: os.mkdir(f'/tmp/{tag}'),
            'fifo in /tmp': lambda: os.mkfifo(f'/tmp/{tag}'),
            'symlink in /dev/shm': lambda: os.symlink('/etc/passwd', f'/dev/shm/{tag}'),
            'file beside its own directories':
                lambda: open(os.path.join(os.path.dirname(os.getcwd()), tag), 'w').close(),
            'file in the service tree': lambda: open(os.path.join(service_dir, tag), 'w').close(),
            'write to /proc/self/mem': lambda: open('/proc/self/mem', 'r+b', buffering=0).close(),
            'write to /proc/self/attr/current': lambda: open('/proc/self/attr/current', 'w').close(),
            'truncate /dev/null': lambda: open('/dev/null', 'w').write('ok'),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                out[name] = 'done'
            except OSError as e:
                out[name] = type(e).__name__
        return [tag, out]
    """)


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_writes_nothing_outside_its_own_directories(tier: LaunchedTier) -> None:
    _needs_landlock()
    run, _ = hostile(box_for(tier, guards=False), WRITES_OUTSIDE, [str(SERVICE_ROOT / "app")])
    result = observed(run)
    assert isinstance(result, list), (run.status, run.fault)
    tag, got = result
    # /dev/null and its like are the case's to write (bubblewrap's minimal /dev); nothing else is
    assert got.pop("truncate /dev/null") == "done"
    # /tmp, /var/tmp and /dev/shm are world-writable: only Landlock refuses these
    assert got == dict.fromkeys(got, "PermissionError"), got
    for place in ("/tmp", "/var/tmp", "/dev/shm", str(SERVICE_ROOT / "app")):
        assert not os.path.lexists(os.path.join(place, tag))


OWN_DIRECTORIES = code("""
    import os, shutil, tempfile
    def attack():
        done = []
        for base in (os.environ['TMPDIR'], os.environ['HOME'], os.getcwd(), tempfile.gettempdir()):
            d = os.path.join(base, 'd')
            os.mkdir(d)
            with open(os.path.join(d, 'f'), 'w') as f:
                f.write('x' * 10)
            os.truncate(os.path.join(d, 'f'), 3)
            os.rename(os.path.join(d, 'f'), os.path.join(d, 'g'))
            os.symlink('g', os.path.join(d, 'l'))
            os.link(os.path.join(d, 'g'), os.path.join(d, 'h'))
            os.mkfifo(os.path.join(d, 'p'))
            done.append([open(os.path.join(d, 'l')).read(), sorted(os.listdir(d))])
            shutil.rmtree(d)
        with tempfile.NamedTemporaryFile() as f:
            f.write(b'y')
        return done
    """)


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_keeps_full_use_of_its_own_directories(tier: LaunchedTier) -> None:
    _needs_landlock()
    run = box_for(tier, guards=False).run(OWN_DIRECTORIES, "attack", [])
    assert observed(run) == [["xxx", ["g", "h", "l", "p"]]] * 4, (run.status, run.fault, run.final)
    assert (run.armed or {}).get("landlock") == {"abi": ABI}


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_the_plain_tier_reports_landlock_in_force(tier: LaunchedTier) -> None:
    _needs_landlock()
    status = box_for(tier).status()
    assert status["ok"] and status["landlock"] == {"in_force": True, "abi": ABI, "reason": None}
    assert "Landlock" in status["guarantees"]


# ---------------------------------------------------------------- honest cases still pass


def _honest_tiers() -> list[LaunchedTier]:
    # every exercise under both launchers, with the deny-list (the filter-less twin runs the same
    # Landlock rules; the attacks above cover it)
    return [t for t in plain_tiers() if t.endswith("+seccomp")] or plain_tiers()


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
@pytest.mark.parametrize("tier", _honest_tiers(), ids=lambda t: t.id)
def test_every_reference_solution_passes_in_the_plain_tier(tier: LaunchedTier, exercise) -> None:
    sb = tier_settings(tier, wall_seconds=20.0, cpu_seconds=10.0, warm_pool_size=1,
                       address_space_bytes=2 * 1024**3)
    source = inspect.getsource(getattr(reference, exercise.entry))
    result = grade_source(exercise, source, all_or_nothing=False, settings=Settings(sandbox=sb),
                          seed=random_case_seed())
    verdicts = [c["verdict"] for c in result.details["cases"]]
    assert verdicts == ["passed"] * exercise.case_count, (exercise.profile, result.details)
    assert result.details["sandbox_tier"].startswith("plain")


# ---------------------------------------------------------------- without Landlock


# A service process under a seccomp filter of "the host's" that refuses Landlock's calls (as a
# container runtime's may): ENOSYS for landlock_create_ruleset. The children inherit it.
_WITHOUT_LANDLOCK = textwrap.dedent("""
    import ctypes, json, logging, os, sys
    sys.path.insert(0, {root!r})
    from app.sandbox.child.channels import _Instruction, _Program, _ARCHES
    arch = _ARCHES[os.uname().machine][0]
    prog = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, 0x7FFF0000), (0x20, 0, 0, 0),
            (0x15, 0, 1, 444), (0x06, 0, 0, 0x00050000 | 38), (0x06, 0, 0, 0x7FFF0000)]
    insns = (_Instruction * len(prog))(*prog)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0
    fprog = _Program(len(prog), ctypes.cast(insns, ctypes.POINTER(_Instruction)))
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    from app.sandbox.pool import Sandbox
    from tests.sandbox.tiers import LaunchedTier, tier_settings
    box = Sandbox(tier_settings(LaunchedTier({tier!r}, {launcher!r}), warm_pool_size=0))
    try:
        status = box.status()
        run = box.run("def attack(p):\\n    return open(p).read()[:400]\\n", "attack", [{target!r}])
        print(json.dumps({{"status": {{k: status[k] for k in ("ok", "tier", "landlock")}},
                          "value": (run.final or {{}}).get("result"),
                          "landlock": (run.armed or {{}}).get("landlock")}}))
    finally:
        box.shutdown()
""")


@pytest.mark.parametrize("launcher", ["exec", "forkserver"])
def test_without_landlock_the_plain_tier_runs_as_before_and_says_so(launcher: str) -> None:
    if "plain+seccomp" not in {str(t) for t in plain_tiers()}:
        pytest.skip("plain+seccomp is not offered on this machine")
    program = _WITHOUT_LANDLOCK.format(root=str(SERVICE_ROOT), tier="plain+seccomp", launcher=launcher,
                                       target=str(TARGET))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          cwd=SERVICE_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    landlock = report["status"]["landlock"]
    assert report["status"]["ok"] and report["status"]["tier"] == "plain+seccomp"
    assert landlock["in_force"] is False and landlock["abi"] == 0 and "seccomp" in landlock["reason"], landlock
    assert report["landlock"] == {"abi": 0, "why": landlock["reason"]}
    # as before: the case reads what its uid may read (the documented gap), and the log says so, once
    assert report["value"] == {"kind": "value", "value": MARKER}
    assert done.stderr.count("without Landlock") == 1, done.stderr[-3000:]


# ---------------------------------------------------------------- the ruleset for each ABI


@pytest.mark.parametrize("abi", range(0, 9))
def test_the_ruleset_handles_every_right_its_abi_knows_and_no_other(abi: int) -> None:
    """The kernel refuses a ruleset that names a right it does not know (EINVAL), and a right left
    unhandled would be allowed: the bits of include/uapi/linux/landlock.h, ABI by ABI."""
    fs, net, scoped = handled_access(abi)
    known_fs = {0: 0, 1: 0x1FFF, 2: 0x3FFF, 3: 0x7FFF, 4: 0x7FFF}.get(abi, 0xFFFF)
    assert fs == known_fs
    assert net == (0b11 if abi >= 4 else 0)  # TCP bind, connect
    assert scoped == (0b11 if abi >= 6 else 0)  # abstract unix sockets, signals
    assert rule_access("full", fs) == fs and rule_access("list", fs) == (FS_READ_DIR if abi else 0)
    # what a rule grants never reaches past what the ruleset handles
    for kind in ("read", "list", "device", "full"):
        assert rule_access(kind, fs) & ~fs == 0


HOST_SHM = code("""
    import os
    def attack(path):
        out = []
        for attempt in (lambda: open(path).read(), lambda: os.listdir('/dev/shm'), lambda: os.listdir('/dev')):
            try:
                out.append(attempt())
            except OSError as e:
                out.append(type(e).__name__)
        return out
    """)


@pytest.mark.parametrize("tier", plain_tiers(), ids=lambda t: t.id)
def test_a_plain_case_cannot_read_what_the_host_keeps_in_dev_shm(tier: LaunchedTier) -> None:
    """Another process's world-readable shared memory: bubblewrap's /dev/shm is the case's own; the
    plain tier's Landlock rules grant only bubblewrap's few devices of /dev."""
    _needs_landlock()
    secret = f"/dev/shm/plain-host-{os.getpid()}"
    Path(secret).write_text("host shared memory")
    os.chmod(secret, 0o644)
    try:
        run, _ = hostile(box_for(tier, guards=False), HOST_SHM, [secret])
    finally:
        os.unlink(secret)
    assert observed(run) == ["PermissionError"] * 3, (run.status, run.fault, observed(run))
