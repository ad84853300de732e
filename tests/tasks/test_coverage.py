"""The coverage map at the original environment's granularity: 58 key-content items, each
covered by at least one task across the splits; the CLI's --strict mode and GET /v1/coverage
report them."""

from __future__ import annotations

import argparse

import httpx
import pytest

from app.commands import coverage as coverage_command
from app.tasks.coverage import compute_coverage, item_ids, key_content

# Items per chapter in the original environment's map (the issue lists them by chapter).
EXPECTED_ITEMS_PER_CHAPTER = {
    "roofline": 4, "tpus": 5, "sharding": 6, "transformers": 7, "training": 7, "applied-training": 3,
    "inference": 7, "applied-inference": 4, "profiling": 4, "jax-stuff": 4, "gpus": 7,
}
# A few of the finer items, by what they must be about (title words), chapter by chapter.
FINE_ITEMS = {
    "tpus.bandwidths": ("HBM", "ICI", "PCIe", "DCN"),
    "sharding.allgather-contracting": ("AllGather", "contracting"),
    "sharding.alltoall": ("AllToAll", "non-contracting"),
    "transformers.attention": ("MHA", "GQA"),
    "training.pipeline-dcn": ("bubbles", "microbatches"),
    "training.cross-pod": ("DCN",),
    "inference.kv-reductions": ("KV cache",),
    "applied-inference.balancing": ("prefill", "decode"),
    "profiling.hlo": ("HLO", "replica groups"),
    "jax.collectives": ("collectives",),
    "gpus.sharp": ("SHARP",),
}


def test_fifty_eight_items_at_the_original_granularity() -> None:
    content = key_content()
    assert {c: len(v.items) for c, v in content.items()} == EXPECTED_ITEMS_PER_CHAPTER
    assert len(item_ids()) == 58
    titles = [i.title for c in content.values() for i in c.items]
    assert len(set(titles)) == len(titles)
    for item, words in FINE_ITEMS.items():
        title = next(i.title for c in content.values() for i in c.items if i.id == item)
        assert all(w in title for w in words), (item, title)


def test_every_item_is_covered_by_some_task(service_env) -> None:
    cov = compute_coverage(service_env)
    assert not cov.unavailable, cov.unavailable
    assert cov.uncovered() == []
    assert not cov.unknown_tags
    assert len(cov.counts) == 58


def _strict(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    coverage_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["coverage", *argv])
    return args.func(args)


def test_strict_passes_on_all_splits_and_fails_on_any_gap(service_env, capsys) -> None:
    assert _strict(["--strict"]) == 0
    out = capsys.readouterr().out
    assert "0 of 58 key-content items have no task in any split." in out
    # One split alone leaves items uncovered: strict must fail and name them.
    assert _strict(["--strict", "--split", "synthetic"]) == 1
    assert "(uncovered)" in capsys.readouterr().out


@pytest.mark.slow
def test_coverage_endpoint_reports_the_58_items(server_url) -> None:
    r = httpx.get(f"{server_url}/v1/coverage", timeout=120)
    assert r.status_code == 200
    data = r.json()
    items = [i for c in data["chapters"] for i in c["items"]]
    assert len(items) == 58 and data["uncovered"] == []
    assert all(i["total"] >= 1 for i in items)
