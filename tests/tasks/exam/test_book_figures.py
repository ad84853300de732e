"""The project's formulas reproduce figures the book itself prints, within the book's rounding.

Each case names the chapter, a snippet that must appear verbatim in the verified chapter (so the
figure is genuinely the book's), the printed value, the size of one unit in its last printed digit
(the rounding allowance), and the computation with our formulas on the book's own inputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.tasks import formulas as fm
from app.tasks.exam.numeric import applied_training, gpus, roofline, tpus, transformers
from app.tasks.exam.source import chapter_text

# (case id, chapter, snippet in the book, printed value, one unit of its last digit, computation)
CASES: list[tuple[str, str, str, float, float, Callable[[], float]]] = [
    # rooflines
    ("v5e-critical-intensity", "roofline", "this is about 240 FLOPs/byte", 240, 1,
     lambda: fm.intensity(1.97e14, 8.2e11)),
    ("h100-1e12-flops", "roofline", "1e12 / 9.89e14 = 1.01ms", 1.01e-3, 0.01e-3,
     lambda: fm.compute_time(1e12, 9.89e14)),
    ("two-chip-critical-d", "roofline", "or $D > 8755$", 8755, 1,
     lambda: roofline.two_chip_critical_d(link=4.5e10, peak=1.97e14)),
    # TPUs
    ("mxu-throughput", "tpus", "This is about `5e13` bf16 FLOPs/s per MXU at 1.5GHz", 5e13, 1e13,
     lambda: tpus.mxu_peak(rows=8, width=128, cycles=8, n_mxu=1, clock=1.5e9)),
    ("v5e-chip-throughput", "tpus", "the total bf16 FLOPs/s for TPU v5e is `2e14`", 2e14, 1e14,
     lambda: tpus.mxu_peak(rows=8, width=128, cycles=8, n_mxu=4, clock=1.5e9)),
    ("pod-exaflops", "tpus", "A single pod of 8960 chips can do 4 exaflops", 4e18, 1e18,
     lambda: tpus.pod_flops(x=16, y=20, z=28, peak=4.59e14)),
    # sharding
    ("allgather-34mb", "sharding", "\\text{34e6} / \\text{9e10} = \\text{377us}", 377e-6, 1e-6,
     lambda: fm.allgather_time(34e6, 9e10)),
    ("allgather-no-wrap", "sharding", "3 * \\text{8.4e6} / \\text{4.5e10} = 560\\mu s", 560e-6, 10e-6,
     lambda: fm.comms_time(3 * 8.4e6, 4.5e10)),
    # transformers
    ("kv-cache-8gib", "transformers", "2 \\cdot 8192 \\cdot 64 \\cdot 8192 = 8\\text{GiB}", 8 * 2**30, 2**30,
     lambda: fm.kv_cache_bytes(8192, 64, 64, 128, 1)),
    ("activations-84tb", "transformers", "2 * 20 * B * T * D * L = 84TB", 84e12, 1e12,
     lambda: transformers.activation_bytes(c=20, b=2, tokens=4e6, d=8192, layers=64)),
    ("block-remat-4.2tb", "transformers", "we'd only save 4.2TB", 4.2e12, 0.1e12,
     lambda: transformers.activation_bytes(c=1, b=2, tokens=4e6, d=8192, layers=64)),
    # training
    ("dp-threshold-2550", "training", "`4.59e14 / 1.8e11 = 2550` for v5p", 2550, 1,
     lambda: fm.dp_min_batch_per_chip(4.59e14, 1.8e11, 1)),
    ("dp-three-axes-850", "training", "can scale down to only BS=850 per TPU", 850, 10,
     lambda: fm.dp_min_batch_per_chip(4.59e14, 1.8e11, 3)),
    ("dcn-71360", "training", "`4.46e14 / 6.25e9 = 71,360`", 71360, 1,
     lambda: fm.dp_min_batch_per_chip(4.46e14, 6.25e9, 1)),
    ("mixed-99", "training", "This gives roughly $B/N > 99$", 99, 1,
     lambda: fm.mixed_min_batch_per_chip(4.59e14, 1.8e11, 32768, 2)),
    ("mixed-108", "training", "2550^2 / 2 * 30,000 = 108", 108, 1,
     lambda: fm.mixed_min_batch_per_chip(4.59e14, 1.8e11, 30000, 2)),
    ("fsdp-opt-1333", "training", "sqrt(3e6 * 2 * 4096 / 13824) = 1333", 1333, 1,
     lambda: fm.optimal_fsdp(3e6, 13824, 2, 1, 4096)),
    ("chips-18823", "training", "16e6 / (2550 / 3) = 18,823", 18823, 1,
     lambda: 16e6 / fm.dp_min_batch_per_chip(4.59e14, 1.8e11, 3)),
    ("step-300ms", "training", "(4096 * 4.6e14 * 0.4) = 300ms", 0.3, 0.1,
     lambda: fm.training_time(13e9, 3e6, 4096, 4.6e14, 0.4)),
    # applied training
    ("llama70b-ffw", "applied-training", "**56.3e9**", 56.3e9, 0.1e9,
     lambda: 80 * fm.mlp_params(8192, 28672)),
    ("llama70b-attention", "applied-training", "**12e9**", 12e9, 1e9,
     lambda: 80 * fm.attention_params(8192, 64, 8, 128)),
    ("llama70b-vocab", "applied-training", "**2.1e9**", 2.1e9, 0.1e9,
     lambda: fm.dense_params(0, 8192, 28672, 64, 8, 128, 128256)),
    ("llama70b-pod-time", "applied-training", "0.4) = 3.8e6 seconds", 3.8e6, 0.1e6,
     lambda: fm.training_time(70e9, 15e12, 8960, 4.59e14, 0.4)),
    ("llama70b-fsdp-1618", "applied-training", "{28672}} = 1618", 1618, 1,
     lambda: applied_training.balanced_fsdp(batch=4.19e6, chips=8960, f=28672, mx=2)),
    ("llama70b-mixed-113", "applied-training", "$2550^2 / 2F = 113$", 113, 1,
     lambda: fm.mixed_min_batch_per_chip(4.59e14, 1.8e11, 28672, 2)),
    # applied inference (the book's "160kB" per token is 160 KiB: 2 * 8 * 128 * 80 bytes)
    ("kv-per-token-160k", "applied-inference", "2 * 8 * 128 * 80 = 160kB", 160 * 1024, 1024,
     lambda: fm.kv_cache_bytes(1, 80, 8, 128, 1)),
    ("decode-17ms", "applied-inference", "112e9 / (8 * 8.1e11) = 17ms", 17e-3, 1e-3,
     lambda: fm.decode_step_time(70e9, 41.9e9, 8, 8.1e11)),
    ("prefill-0.91s", "applied-inference", "(16 * 1.97e14 * 0.4) = 0.91s", 0.91, 0.01,
     lambda: fm.inference_flops(70e9, 8192) / (16 * 1.97e14 * 0.4)),
    ("h100-flops-per-dollar", "applied-inference", "3.3e17", 3.3e17, 0.1e17,
     lambda: fm.compute_time(9.9e14 * 3600, 10.8)),
    # GPUs
    ("h100-dp-in-node", "gpus", "\\text{990e12} / \\text{450e9} = 2200", 2200, 1,
     lambda: fm.dp_min_batch_per_chip(990e12, 450e9, 1)),
    ("h100-dp-beyond-node", "gpus", "\\text{990e12} / \\text{400e9} = 2475", 2475, 1,
     lambda: fm.dp_min_batch_per_chip(990e12, 400e9, 1)),
    ("moe-79200", "gpus", "`32 * 2475  = 79,200`", 79200, 1,
     lambda: gpus.moe_dp_batch(k=4, e=128, peak=990e12, w=400e9)),
]


@pytest.mark.parametrize(("chapter", "snippet", "printed", "unit", "compute"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_formula_reproduces_book_figure(chapter, snippet, printed, unit, compute, exam_settings):
    assert snippet in chapter_text(exam_settings, chapter), "the figure must be printed in the book"
    value = compute()
    assert abs(value - printed) <= unit, f"{value:.6g} vs the book's {printed:.6g} (+-{unit:g})"


def test_there_are_at_least_fifteen_book_checks():
    assert len(CASES) >= 15
    assert len({c[0] for c in CASES}) == len(CASES)
