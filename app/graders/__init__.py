"""Graders: pure functions from (gold, completion, tolerance) to a GradeResult."""
