"""HTTP layer: one router per resource; shared dependencies in deps.py."""
