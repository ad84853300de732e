"""Accelerator specs from the book's spec tables, one record per chip. The numbers are the
book's (pinned commit), so that synthetic and authored tasks agree with what the book teaches;
the book split's tests parse those tables and check these records field by field.

Units: bytes, bytes/s, FLOP/s. Where a table quotes a figure the chip does not have (V100 bf16),
the field is None."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ChipSpec:
    name: str
    kind: Literal["tpu", "gpu"]
    hbm_bytes: float
    hbm_bandwidth: float  # bytes/s per chip
    bf16_flops: float | None  # FLOP/s per chip
    int8_flops: float | None  # int8 OP/s for TPUs; fp8/int8 for GPUs
    ici_bandwidth_bidi: float | None = None  # TPU: bytes/s per ICI link, both directions
    ici_bandwidth_oneway: float | None = None
    nvlink_bandwidth: float | None = None  # GPU: bytes/s per GPU inside a node (full duplex)
    fp4_flops: float | None = None
    source: str = ""  # chapter and table the figures come from


_TPU_TABLE = "tpus: TPU specs table (HBM, bandwidth, FLOPs) and ICI bandwidth table"
_GPU_TABLE = "gpus: GPU specs tables (HBM capacity; HBM bandwidth and FLOPs); NVLink node bandwidth"

CHIPS: dict[str, ChipSpec] = {
    c.name: c
    for c in (
        ChipSpec("TPU v3", "tpu", 32e9, 9.0e11, 1.4e14, 1.4e14, 2e11, 1e11, source=_TPU_TABLE),
        ChipSpec("TPU v4p", "tpu", 32e9, 1.2e12, 2.75e14, 2.75e14, 9e10, 4.5e10, source=_TPU_TABLE),
        ChipSpec("TPU v5p", "tpu", 96e9, 2.8e12, 4.59e14, 9.18e14, 1.8e11, 9e10, source=_TPU_TABLE),
        ChipSpec("TPU v5e", "tpu", 16e9, 8.1e11, 1.97e14, 3.94e14, 9e10, 4.5e10, source=_TPU_TABLE),
        ChipSpec("TPU v6e", "tpu", 32e9, 1.6e12, 9.20e14, 1.84e15, 1.8e11, 9e10, source=_TPU_TABLE),
        ChipSpec("V100", "gpu", 32e9, 9.0e11, None, None, source=_GPU_TABLE),
        ChipSpec("A100", "gpu", 80e9, 2.0e12, 3.1e14, 6.2e14, nvlink_bandwidth=300e9, source=_GPU_TABLE),
        ChipSpec("H100", "gpu", 80e9, 3.4e12, 9.9e14, 2.0e15, nvlink_bandwidth=450e9, source=_GPU_TABLE),
        ChipSpec("H200", "gpu", 141e9, 4.8e12, 9.9e14, 2.0e15, nvlink_bandwidth=450e9, source=_GPU_TABLE),
        ChipSpec(
            "B200", "gpu", 192e9, 8.0e12, 2.3e15, 4.5e15, nvlink_bandwidth=900e9, fp4_flops=9.0e15,
            source=_GPU_TABLE,
        ),
    )
}

TPUS: tuple[ChipSpec, ...] = tuple(c for c in CHIPS.values() if c.kind == "tpu")
# Chips with a bf16 figure: the ones a roofline question can use.
COMPUTE_CHIPS: tuple[ChipSpec, ...] = tuple(c for c in CHIPS.values() if c.bf16_flops is not None)
