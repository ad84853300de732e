"""Once per serving process, after start-up."""

from __future__ import annotations

import gc

_frozen = False


def freeze_startup_objects() -> None:
    """Move what start-up built (modules, schemas, routes: they live as long as the process) out
    of the cyclic collector's sight, once per process. Otherwise every full collection walks all
    of it again, a pause of tens of milliseconds each time; and right after start the imports'
    leftovers bring the first one within seconds of serving."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
