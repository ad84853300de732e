"""Results the bank is required to reproduce (issue 7), each to the digits shown there.

These are checks on the reference solutions, not expected outputs: the expected outputs are
whatever the solutions compute, and verification fails if they stop matching these."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any


@dataclass(frozen=True, slots=True)
class Anchor:
    task_id: str
    key: tuple[str, Any]  # (field, value) selecting the row
    field: str
    shown: str  # the value as written in the issue; its digits fix the rounding
    what: str

    def rounded(self, value: float) -> str:
        exponent = Decimal(self.shown).as_tuple().exponent
        quantum = Decimal(1).scaleb(exponent if isinstance(exponent, int) else 0)
        return str(Decimal(repr(value)).quantize(quantum, rounding=ROUND_HALF_EVEN))


ANCHORS: tuple[Anchor, ...] = (
    Anchor("sc-000", ("batch", 1024), "intensity", "683", "bf16 matmul, D = F = 4096, batch 1024"),
    Anchor("sc-000", ("batch", 1024), "intensity", "682.67", "bf16 matmul, D = F = 4096, batch 1024"),
    Anchor("sc-000", ("batch", 1), "intensity", "0.9995", "bf16 matmul, D = F = 4096, batch 1"),
    Anchor(
        "sc-011", ("seq_len", 8192), "attention_fraction", "0.16", "attention share of a layer at S = 8192"
    ),
    Anchor("sc-015", ("component", "adam_state"), "multiple_of_weights", "6", "Adam state over bf16 weights"),
    Anchor("sc-016", ("model", "70B"), "chips", "11", "96 GiB chips holding a 70B training state"),
    Anchor("sc-024", ("chips", 64), "ratio", "6.1", "64-way gradient all-reduce over step compute"),
    Anchor("sc-028", ("model", "70B"), "tokens_per_s", "11.4", "batch-1 decode of 70B bf16 at 1.6 TB/s"),
)
