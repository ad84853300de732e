"""Benchmarks. Each bench_*.py module exposes ``main(smoke: bool) -> None`` and prints ratios
against a baseline measured in the same run; ``python -m bench [--smoke] [name ...]`` runs them."""
