"""Reading the grade ledger's windows in tests."""

from __future__ import annotations


def window_totals(window: dict) -> dict:
    """(split, outcome) -> grades over a window of buckets (app.grade_ledger.Window)."""
    found: dict = {}
    for counts in window.values():
        for key, n in counts.items():
            found[key] = found.get(key, 0) + n
    return found
