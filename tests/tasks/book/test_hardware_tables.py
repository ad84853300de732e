"""The spec tables parsed from the verified TPU and GPU chapters equal the hardware catalog,
field by field, so the catalog cannot drift from the book it cites."""

from __future__ import annotations

import math

import pytest

from app.tasks.book.hardware_tables import chip_records, chips_named, find_tables
from app.tasks.hardware import CHIPS

FIELDS = (
    "kind", "hbm_bytes", "hbm_bandwidth", "bf16_flops", "int8_flops", "fp4_flops",
    "ici_bandwidth_bidi", "ici_bandwidth_oneway", "nvlink_bandwidth",
)


@pytest.fixture(scope="module")
def records(chapters):
    return chip_records(chapters["tpus"].text, chapters["gpus"].text)


def test_same_chips(records) -> None:
    assert set(records) == set(CHIPS)


@pytest.mark.parametrize("name", sorted(CHIPS))
@pytest.mark.parametrize("field", FIELDS)
def test_field_equals_catalog(records, name: str, field: str) -> None:
    parsed, catalog = getattr(records[name], field), getattr(CHIPS[name], field, None)
    if isinstance(parsed, float) or isinstance(catalog, float):
        assert parsed is not None and catalog is not None, (name, field, parsed, catalog)
        assert math.isclose(parsed, catalog, rel_tol=1e-9), (name, field, parsed, catalog)
    else:
        assert parsed == catalog, (name, field)


def test_catalog_cites_the_tables(records) -> None:
    for name, spec in CHIPS.items():
        chapter = "tpus" if spec.kind == "tpu" else "gpus"
        assert spec.source.startswith(chapter), name
        assert all(key.startswith(chapter) for key, _ in records[name].rows)


def test_every_chip_row_is_a_source_line(chapters, records) -> None:
    for record in records.values():
        text = chapters["tpus" if record.kind == "tpu" else "gpus"].text
        for _, line in record.rows:
            assert f"\n{line}\n" in text


def test_tables_found_by_header_shape(chapters) -> None:
    # The TPU chapter's spec table has one row per TPU generation in the catalog.
    spec = [t for t in find_tables("tpus", chapters["tpus"].text) if "Pod size" in t.header]
    assert len(spec) == 1 and len(spec[0].rows) == sum(c.kind == "tpu" for c in CHIPS.values())


NAMES = {
    "a TPU v5e 4x4 slice": ["TPU v5e"],
    "TPUv4p 4x4x4": ["TPU v4p"],
    "on H100s and B200s": ["H100", "B200"],
    "an 8xH100 node": ["H100"],
    "H100SXM5": [],
    "DeepSeek v3 on H800": [],
    "compare v5p with the GB200": ["TPU v5p"],
    "A100 vs H200": ["A100", "H200"],
}


@pytest.mark.parametrize(("text", "expected"), NAMES.items(), ids=NAMES.keys())
def test_chips_named(text: str, expected: list[str]) -> None:
    assert chips_named(text) == expected
