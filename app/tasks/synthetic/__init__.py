"""The synthetic split: unlimited, deterministic, regenerable from the task id alone."""
