"""Reference solutions, one function per task: ``solve(params, conventions) -> rows``.

They compute with exact fractions from the numbers the task states, so the stored expectation
is the correctly rounded float of the exact answer; the grader's 1e-9 tolerance then only has
to absorb a candidate's own order of operations."""
