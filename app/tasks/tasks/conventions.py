"""The conventions every task relies on, as text for the prompt and as numbers for the reference
solutions. Reference solutions take a ``Conventions`` so that verification can re-run them with
one convention deliberately broken (a *slip*) and prove that the grader rejects the result."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# Shared preamble of every task (the ``api_description`` field). Written for this project.
API_DESCRIPTION = """\
Conventions for every task in this set. Each task states all the numbers it needs: use those \
numbers and these conventions, never a figure recalled from elsewhere.

- FLOPs: a multiply-add is 2 FLOPs, so multiplying an [M, K] matrix by a [K, N] matrix costs \
2·M·K·N FLOPs. An elementwise operation costs 1 FLOP per output element.
- Training: the backward pass of a matmul costs twice its forward pass (one matmul for the \
input gradient, one for the weight gradient), so training a model of P parameters on T tokens \
costs 6·P·T FLOPs and a forward pass costs 2·P FLOPs per token.
- Bytes: bf16 = 2 bytes, fp32 = 4 bytes, int8 = 1 byte, int4 = 0.5 bytes per value. An \
operation reads each input from HBM once and writes its output once.
- Units: GB = 1e9 bytes, GiB = 2^30 bytes, TB/s = 1e12 bytes/s. Times are in seconds unless a \
field name ends in _ms (milliseconds); days are 86400 s.
- Roofline: compute time = FLOPs / peak FLOP/s; memory time = bytes / HBM bandwidth. With \
overlap an operation takes the larger of the two, without overlap their sum. Arithmetic \
intensity = FLOPs / bytes. An operation is "compute"-bound when its intensity is at least the \
hardware's (peak FLOP/s divided by bandwidth), and "memory"-bound otherwise. When the other \
side is a network link, the same comparison with bytes sent decides between "compute" and \
"communication".
- Collectives on a ring of N chips, with W the per-chip bandwidth the task states and V the \
size in bytes of the full (gathered, or unreduced) array: an all-gather or a reduce-scatter \
takes (N-1)/N · V / W; an all-reduce is a reduce-scatter followed by an all-gather and takes \
2 · (N-1)/N · V / W. Latency is ignored.
- Mixed-precision training with Adam: weights and gradients are bf16 (2 bytes per parameter \
each); the Adam state is an fp32 master copy of the weights plus two fp32 moments, 12 bytes \
per parameter.
- Transformer layer: width D, N query heads, K key/value heads, head size H, gated MLP of \
hidden size F. The attention projections hold 2·D·N·H (query, output) + 2·D·K·H (key, value) \
parameters and the MLP 3·D·F; norms and biases are ignored. The attention dot products \
(scores and the weighted sum of values) cost 4·S·N·H FLOPs per query token in the forward \
pass for a context of S tokens, with no saving from a causal mask.
- KV cache: 2·K·H values per token per layer (one key and one value per key/value head).
- Answer: one JSON object {"rows": [...]} in a ```json fenced block. Give the rows in the order \
the task asks for, each with exactly the listed fields and types: integers as JSON integers, \
numbers at full precision (do not round: numbers are compared at a relative tolerance of \
1e-9, so a figure rounded to 6 significant digits is wrong), strings exactly as given, booleans \
as true or false. Compute the numbers with code: a code tool (Python) is expected for every \
task; hand arithmetic is not exact enough."""


@dataclass(frozen=True, slots=True)
class Conventions:
    """The numeric conventions of the preamble. The defaults are the correct ones."""

    flops_per_mac: int = 2
    bf16_bytes: Fraction = Fraction(2)
    ring_share: bool = True  # the (N-1)/N factor of ring collectives

    def ring(self, n: int) -> Fraction:
        """Fraction of the full array each chip sends in an all-gather or reduce-scatter."""
        return Fraction(n - 1, n) if self.ring_share else Fraction(1)


CORRECT = Conventions()

# Plausible wrong formulas: each breaks one convention. Verification checks that a task whose
# answer they change is graded wrong, and that tasks declaring a slip really depend on it.
SLIPS: dict[str, Conventions] = {
    "missing_ring_factor": Conventions(ring_share=False),
    "mac_as_one_flop": Conventions(flops_per_mac=1),
    "bf16_as_one_byte": Conventions(bf16_bytes=Fraction(1)),
}

FP32_BYTES = Fraction(4)
INT8_BYTES = Fraction(1)
INT4_BYTES = Fraction(1, 2)
ADAM_BYTES = 3 * FP32_BYTES  # master weights and two moments
GIB = 2**30
DAY_S = 86400


def q(x: int | float | str | Fraction) -> Fraction:
    """Exact rational form of a stated number: a float is read as the decimal it prints as,
    so 0.7 is 7/10 and 1.97e14 is 197000000000000."""
    if isinstance(x, float):
        return Fraction(repr(x))
    return Fraction(x)
