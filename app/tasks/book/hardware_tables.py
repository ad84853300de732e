"""The spec tables of the TPU and GPU chapters, read from the verified source.

Two uses: records per chip (checked field by field against app.tasks.hardware.CHIPS, so the
catalog cannot drift from the book), and the source rows for prompts (a question naming a chip
gets that chip's rows, so it can be answered from the prompt alone)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.quantities import parse_quantity

_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class Table:
    chapter: str
    header: list[str]
    header_line: str
    separator_line: str
    rows: list[tuple[list[str], str]]  # (cells, the row's source line)
    line: int  # 1-based line of the header

    def column(self, *needles: str) -> int:
        """Index of the first header cell containing every needle (case-insensitive)."""
        for i, cell in enumerate(self.header):
            if all(n.lower() in cell.lower() for n in needles):
                return i
        raise LookupError(f"{self.chapter} table at line {self.line}: no column with {needles}")

    def has_column(self, *needles: str) -> bool:
        try:
            self.column(*needles)
        except LookupError:
            return False
        return True


@dataclass
class ChipRecord:
    name: str
    kind: str  # "tpu" | "gpu"
    hbm_bytes: float | None = None
    hbm_bandwidth: float | None = None
    bf16_flops: float | None = None
    int8_flops: float | None = None
    fp4_flops: float | None = None
    ici_bandwidth_bidi: float | None = None
    ici_bandwidth_oneway: float | None = None
    nvlink_bandwidth: float | None = None
    generation: str | None = None
    # (table key, source row) pairs, in table order, for prompts.
    rows: list[tuple[str, str]] = field(default_factory=list)


def _cell_text(cell: str) -> str:
    return _TAG.sub("", cell).replace("**", "").strip()


def _split_row(line: str) -> list[str]:
    return [_cell_text(c) for c in line.strip().strip("|").split("|")]


def find_tables(chapter: str, text: str) -> list[Table]:
    """Every pipe table: a header row, a separator row of dashes, then data rows."""
    lines = text.split("\n")
    tables: list[Table] = []
    i = 0
    while i + 1 < len(lines):
        head, sep = lines[i], lines[i + 1]
        if head.lstrip().startswith("|") and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", sep) and "-" in sep:
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append((_split_row(lines[j]), lines[j]))
                j += 1
            tables.append(Table(chapter, _split_row(head), head, sep, rows, i + 1))
            i = j
        else:
            i += 1
    return tables


def _number(cell: str) -> float | None:
    """A table figure in base units ("32GB" -> 3.2e10, "9.0e11" -> 9e11); None for "—" or "?"."""
    cell = cell.strip()
    if not cell or cell in {"—", "-", "?", "–"}:
        return None
    return parse_quantity(cell).value


def _one(tables: list[Table], *needles: str) -> Table:
    found = [t for t in tables if all(t.has_column(n) for n in needles)]
    if len(found) != 1:
        raise LookupError(f"expected one table with columns {needles}, found {len(found)}")
    return found[0]


# The five spec tables, found by the columns only they have: key -> (chapter, header needles).
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tpus:specs": ("tpus", ("HBM capacity", "FLOPs/s/chip (bf16)")),
    "tpus:ici": ("tpus", ("ICI BW/link (bidi",)),
    "gpus:memory": ("gpus", ("HBM capacity/chip", "Generation")),
    "gpus:flops": ("gpus", ("HBM BW/chip", "FLOPs/s/chip (bf16")),
    "gpus:nvlink": ("gpus", ("Node GPU to GPU bandwidth",)),
}


def spec_tables(tpus_text: str, gpus_text: str) -> dict[str, Table]:
    found = {"tpus": find_tables("tpus", tpus_text), "gpus": find_tables("gpus", gpus_text)}
    return {key: _one(found[chapter], *needles) for key, (chapter, needles) in TABLES.items()}


def _tpu_records(tables: dict[str, Table]) -> dict[str, ChipRecord]:
    specs, ici = tables["tpus:specs"], tables["tpus:ici"]
    out: dict[str, ChipRecord] = {}
    for cells, line in specs.rows:
        name = cells[specs.column("Model")]
        out[name] = ChipRecord(
            name=name,
            kind="tpu",
            hbm_bytes=_number(cells[specs.column("HBM capacity")]),
            hbm_bandwidth=_number(cells[specs.column("HBM BW")]),
            bf16_flops=_number(cells[specs.column("FLOPs/s", "bf16")]),
            int8_flops=_number(cells[specs.column("FLOPs/s", "int8")]),
            rows=[("tpus:specs", line)],
        )
    for cells, line in ici.rows:
        record = out[cells[ici.column("Model")]]
        record.ici_bandwidth_oneway = _number(cells[ici.column("one-way")])
        record.ici_bandwidth_bidi = _number(cells[ici.column("bidi")])
        record.rows.append(("tpus:ici", line))
    return out


def _gpu_records(tables: dict[str, Table]) -> dict[str, ChipRecord]:
    memory, flops, nvlink = tables["gpus:memory"], tables["gpus:flops"], tables["gpus:nvlink"]
    out: dict[str, ChipRecord] = {}
    for cells, line in memory.rows:
        name = cells[memory.column("GPU")]
        out[name] = ChipRecord(
            name=name,
            kind="gpu",
            hbm_bytes=_number(cells[memory.column("HBM capacity")]),
            generation=cells[memory.column("Generation")],
            rows=[("gpus:memory", line)],
        )
    for cells, line in flops.rows:
        record = out[cells[flops.column("GPU")]]
        record.hbm_bandwidth = _number(cells[flops.column("HBM BW")])
        record.bf16_flops = _number(cells[flops.column("bf16")])
        record.int8_flops = _number(cells[flops.column("int8")])
        record.fp4_flops = _number(cells[flops.column("fp4")])
        record.rows.append(("gpus:flops", line))
    # NVLink figures are per GPU generation (GB/s, full duplex); Volta has no row.
    by_generation = {cells[nvlink.column("GPU Generation")]: (cells, line) for cells, line in nvlink.rows}
    for record in out.values():
        if record.generation in by_generation:
            cells, line = by_generation[record.generation]
            gbps = _number(cells[nvlink.column("Node GPU to GPU bandwidth")])
            record.nvlink_bandwidth = None if gbps is None else gbps * 1e9
            record.rows.append(("gpus:nvlink", line))
    return out


def table_headers(tpus_text: str, gpus_text: str) -> dict[str, tuple[str, str]]:
    """Table key -> (header line, separator line), to print rows under their own header."""
    return {key: (t.header_line, t.separator_line) for key, t in spec_tables(tpus_text, gpus_text).items()}


def chip_records(tpus_text: str, gpus_text: str) -> dict[str, ChipRecord]:
    tables = spec_tables(tpus_text, gpus_text)
    return {**_tpu_records(tables), **_gpu_records(tables)}


# Names a question may use for each chip. A bare "v3" is not matched ("DeepSeek v3" is a model);
# GPU names may be plural or glued to a count ("8xH100s") but not part of another ("GB200").
_CHIP_PATTERNS: dict[str, re.Pattern[str]] = {
    "TPU v3": re.compile(r"\bTPU\s?v3\b"),
    "TPU v4p": re.compile(r"\bTPU\s?v4p?\b|\bv4p\b"),
    "TPU v5p": re.compile(r"\b(?:TPU\s?)?v5p\b"),
    "TPU v5e": re.compile(r"\b(?:TPU\s?)?v5e\b"),
    "TPU v6e": re.compile(r"\b(?:TPU\s?)?v6e\b"),
    **{
        name: re.compile(rf"(?<![A-Z0-9]){name}(?![0-9A-Za-rt-z])")
        for name in ("V100", "A100", "H100", "H200", "B200")
    },
}


def chips_named(text: str) -> list[str]:
    """Chips the text names, in catalog order."""
    return [name for name, pattern in _CHIP_PATTERNS.items() if pattern.search(text)]
