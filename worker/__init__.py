"""The RQ worker: entry point (main.py) and job functions (jobs.py)."""
