"""What the sandbox exposes of the host, and its dedicated uids."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from app.sandbox.plan import SITE_IN_SANDBOX, build_plan, distribution_closure, reachable_by_others
from app.sandbox.uids import UidPool


def test_closure_follows_requirements_but_not_the_service() -> None:
    names = {d.metadata["Name"].lower() for d in distribution_closure(("jax",))}
    assert {"jax", "jaxlib", "numpy", "ml_dtypes"} <= {n.replace("-", "_") for n in names}
    assert not names & {"fastapi", "pydantic", "scaling-grader", "redis", "openai"}


def test_plan_binds_packages_and_never_the_service_tree() -> None:
    plan = build_plan(None, ("numpy", "jax"))
    targets = {b.target for b in plan.site_binds}
    assert f"{SITE_IN_SANDBOX}/numpy" in targets and f"{SITE_IN_SANDBOX}/jax" in targets
    service_root = str(Path(__file__).resolve().parents[2])
    sources = [b.source for b in plan.site_binds + plan.system_binds] + [plan.prefix]
    assert not [s for s in sources if s == service_root or s.startswith(service_root + "/app")]
    assert plan.prefix == sys.base_prefix


def test_staging_maps_unreachable_paths_only() -> None:
    plan = build_plan(None, ("numpy",))
    if plan.is_root:
        assert (plan.prefix in plan.staged) is not reachable_by_others(plan.prefix)
    for source, point in plan.staged.items():
        assert not reachable_by_others(source)
        assert plan.visible(source + "/lib") == point + "/lib"
        assert reachable_by_others(point)
    assert plan.visible("/usr/lib") == "/usr/lib"
    plan.cleanup()


@pytest.mark.parametrize(("mode", "reachable"), [(0o755, True), (0o711, False), (0o700, False)])
def test_reachable_by_others(mode: int, reachable: bool) -> None:
    base = Path(tempfile.mkdtemp())  # directly under /tmp: pytest's tmp_path sits below a 0700 dir
    os.chmod(base, 0o755)
    inner = base / "d"
    inner.mkdir()
    (inner / "f").write_text("x")
    os.chmod(inner / "f", 0o644)
    os.chmod(inner, mode)
    # 0711 lets others traverse to the file but not list the directory; the file is readable.
    assert reachable_by_others(str(inner)) is reachable
    assert reachable_by_others(str(inner / "f")) is (mode != 0o700)
    os.chmod(inner, 0o755)
    shutil.rmtree(base)


def test_uid_pool_hands_out_each_uid_once_and_reuses_the_oldest(tmp_path) -> None:
    pool = UidPool(700_000, 3, tmp_path)  # claims of its own: another test run on the host cannot hold these
    taken = [pool.take() for _ in range(3)]
    assert sorted(taken) == [700_000, 700_001, 700_002]
    with pytest.raises(RuntimeError):
        pool.take()
    pool.give_back(taken[0])
    pool.give_back(taken[1])
    assert pool.take() == taken[0]


@pytest.mark.slow
def test_uid_claims_are_shared_between_processes(tmp_path) -> None:
    """Two workers on one host must never run children under one uid: the second process's pool
    skips the uid the first one holds, and gets it once the first process is gone."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, pathlib; from app.sandbox.uids import UidPool;"
         f"p = UidPool(710_000, 2, pathlib.Path({str(tmp_path)!r})); print(p.take(), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    held = int(holder.stdout.readline())
    pool = UidPool(710_000, 2, tmp_path)
    other = pool.take()
    assert other != held
    with pytest.raises(RuntimeError):
        pool.take()
    holder.kill()
    holder.wait()
    assert pool.take() == held  # the kernel dropped the dead holder's lock
