"""The process tree as /proc shows it, for tests that check what a stopped or killed service left."""

from __future__ import annotations

import os


def stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = stat(int(entry))
            if found is not None:
                children.setdefault(found[1], []).append(int(entry))
    below: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in below:
                below.add(child)
                todo.append(child)
    return below
