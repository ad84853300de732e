"""Extensions: modules named in ``SCALING_GRADER_EXTENSIONS`` (comma-separated import paths) that
register splits and grading kinds (app/tasks/splits.py, app/graders/kinds.py).

Every process of a deployment must hold the same registrations: the API, each worker and each of
a worker's lanes, which are processes of their own started afresh. An environment variable is
what all of them inherit, so each loads the named modules at its start: a module's ``register()``
is called if it has one (else importing it is taken to register). Loading is once per process."""

from __future__ import annotations

import importlib
import os

ENV = "SCALING_GRADER_EXTENSIONS"
_loaded: set[str] = set()


class ExtensionError(Exception):
    """An extension named in the variable could not be loaded: the process must not start without
    registrations its peers have (they would grade, or queue, what it cannot)."""


def extension_names(raw: str | None = None) -> list[str]:
    text = os.environ.get(ENV, "") if raw is None else raw
    return [name.strip() for name in text.split(",") if name.strip()]


def load_extensions(raw: str | None = None) -> list[str]:
    """Import (and register) every extension named, once each; returns the names loaded now."""
    loaded = []
    for name in extension_names(raw):
        if name in _loaded:
            continue
        try:
            module = importlib.import_module(name)
            register = getattr(module, "register", None)
            if callable(register):
                register()
        except Exception as exc:  # any failure: say which extension, and why, in one line
            raise ExtensionError(f"extension {name!r} could not be loaded ({type(exc).__name__}: {exc})") from exc
        _loaded.add(name)
        loaded.append(name)
    return loaded
