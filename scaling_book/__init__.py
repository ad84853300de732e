"""scaling_book: the trainer side of scaling-grader, in one package that needs only httpx.

- ``scaling_book.client``: ``GraderClient`` / ``AsyncGraderClient`` for the service;
- ``scaling_book.trl``, ``scaling_book.verl``, ``scaling_book.openrlhf``: reward helpers;
- the verifiers environment ``scaling-book``: ``load_environment`` here for verifiers 0.3
  (``vf-eval scaling-book``), and ``ScalingBookTaskset`` for verifiers 0.4's v1 API (where
  ``vf-eval scaling-book`` resolves the taskset from this module's ``__all__``).

Grading goes through the service (a URL, or $SCALING_GRADER_URL), over HTTP: nothing here
imports the service, and nothing imports verifiers until it is used."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# The v1 plugin classes are built on first access (they subclass verifiers' own), so importing
# this package never needs verifiers.
_V1_NAMES = ("ScalingBookTaskset", "ScalingBookTask", "ScalingBookTasksetConfig", "ScalingBookData",
             "ScalingBookHarness")
__all__ = ["ScalingBookHarness", "ScalingBookTaskset", "load_environment"]


def load_environment(**env_args: Any) -> Any:
    """verifiers 0.3 entry point (``vf-eval scaling-book``); see ``scaling_book.verifiers_env``."""
    from scaling_book.verifiers_env import load_environment as load

    return load(**env_args)


def __getattr__(name: str) -> Any:
    if name in _V1_NAMES:
        try:
            from scaling_book import verifiers_v1
        except ImportError as exc:
            # An AttributeError, so hasattr() and getattr(..., default) answer instead of raising.
            raise AttributeError(f"scaling_book.{name} needs verifiers 0.4: pip install 'scaling-book[verifiers]' "
                                 f"({exc})") from None
        return getattr(verifiers_v1, name)
    raise AttributeError(f"module 'scaling_book' has no attribute {name!r}")
