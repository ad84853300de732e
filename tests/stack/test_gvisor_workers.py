"""The deployment the docs recommend runs every hidden case behind a gVisor kernel of its own,
started by the worker inside its container: the kernel a case talks to is not the container's
(the host's), and the candidate cannot see the worker, its environment or its Redis password."""

from __future__ import annotations

import json

from tests.stack.stack import Stack, run

# Run by the worker container's own interpreter, through its own sandbox settings.
_CASE = """
import json, os
from app.graders.impl_verdict import decode
from app.sandbox import get_sandbox
from app.settings import Settings
source = '''
import os
def probe():
    seen = []
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                line = open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace')
                seen.append(line.replace(chr(0), ' ')[:200])
            except OSError:
                pass
    return [os.uname().release, seen, sorted(k for k in os.environ if 'REDIS' in k)]
'''
box = get_sandbox(Settings().sandbox)
run = box.run(source, 'probe', [], profile='bare')
result = (run.final or {}).get('result') or {}
print(json.dumps({'tier': run.tier, 'value': decode(result.get('value'))}))
"""


def test_a_case_on_a_worker_talks_to_gvisors_kernel_not_the_hosts(stack: Stack) -> None:
    container = stack.containers("worker")[0]
    host_release = run("docker", "exec", container, "uname", "-r")
    out = json.loads(run("docker", "exec", container, "python", "-c", _CASE).splitlines()[-1])
    assert out["tier"] == "gvisor+seccomp"
    release, processes, redis_vars = out["value"]
    assert release != host_release  # gVisor's kernel answered uname()
    assert processes and not any("scaling-grader" in p or "rq" in p for p in processes), processes
    assert redis_vars == []  # the worker's Redis URL (and password) is not in the case
