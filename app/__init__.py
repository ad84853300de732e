"""scaling-grader: a grading service for RL and evaluation on *How To Scale Your Model*."""

__version__ = "0.1.0"
