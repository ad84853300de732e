"""Attack (reviewer, session 39b; fixed) on app/sandbox/tiers/access_times.py, the program runsc starts
behind: it remounts every mount holding or under a bound source ``noatime``, "keeping their
read-only, nosuid, nodev and noexec flags". A remount with MS_REMOUNT | MS_BIND sets the mount's
per-mount flags to exactly those given, and /proc/self/mountinfo shows one more per-mount flag
those four leave out: ``nosymfollow`` (MS_NOSYMFOLLOW, Linux 5.10). A mount the operator made
``nosymfollow`` (a volume of packages under a bound prefix, say) loses it in runsc's namespace,
which is where runsc and its gofer resolve the host paths they bind in. (nodiratime and the atime
flags are replaced by noatime on purpose; idmapping is not a flag a bind remount changes.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from app.sandbox.tiers import access_times
from tests.sandbox.test_runsc_access_times import _prefix

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
MS_NOSYMFOLLOW = 0x100  # include/uapi/linux/mount.h


def test_a_remount_keeps_nosymfollow() -> None:
    flags = access_times.remount_flags(["rw", "nodev", "relatime", "nosymfollow"])
    assert flags & MS_NOSYMFOLLOW, "a mount's nosymfollow is dropped by its noatime remount"


@as_root
def test_a_nosymfollow_mount_under_a_bound_source_stays_nosymfollow_in_runscs_view() -> None:
    """Reproduction: in a private mount namespace of the test's own (the host's table is not
    touched), a tmpfs mounted ``nosymfollow,nodev`` under a bound source; runsc's view of it
    (the prefix, then grep of its mountinfo): ``rw,nodev,noatime``, no nosymfollow."""
    source = tempfile.mkdtemp(prefix="s39b-bound-")
    try:
        nested = os.path.join(source, "nested")
        os.mkdir(nested)
        setup = f'mount -t tmpfs -o nosymfollow,nodev s39b "{nested}" && exec "$@"'
        show = [sys.executable, "-c", "import sys\nfor line in open('/proc/self/mountinfo'):\n"
                "    f = line.split()\n    if f[4] == sys.argv[1]: print(f[5])", nested]
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", setup, "s39b",
                               *_prefix(source), *show], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        options = done.stdout.strip().split(",")
        assert "noatime" in options and "nodev" in options, options
        assert "nosymfollow" in options, f"runsc sees the nosymfollow mount as {options}"
    finally:
        shutil.rmtree(source, ignore_errors=True)
