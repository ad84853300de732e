"""Run untrusted candidate code: one fresh, isolated ``python -I`` child per case.

``app.sandbox.pool.get_sandbox(settings.sandbox).run(source, entry, args, profile=...)`` is the whole
interface; ``status()`` reports the tier in force for /readyz and grade details."""
