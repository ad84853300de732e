"""Run untrusted candidate code: one fresh, isolated ``python -I`` child per case.

``get_sandbox(settings.sandbox).run(source, entry, args, profile=...)`` is the whole interface;
``status()`` reports the tier in force for /readyz and grade details."""

from app.sandbox.executor import CaseRun
from app.sandbox.pool import Sandbox, Tier, get_sandbox

__all__ = ["CaseRun", "Sandbox", "Tier", "get_sandbox"]
