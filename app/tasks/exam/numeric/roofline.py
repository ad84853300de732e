"""Rooflines: compute, memory and network time, arithmetic intensity, the critical batch size."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "roofline.time-bounds", ("s", "s"), """
    A kernel performs {flops} FLOPs and must move {nbytes} bytes between HBM and the compute units.
    The chip peaks at {peak} FLOPs/s with {bw} bytes/s of HBM bandwidth. Give a lower bound on the
    kernel's run time assuming compute and memory traffic overlap perfectly, then an upper bound
    assuming they do not overlap at all (lower bound first).""",
    flops=3.0e12, nbytes=1.2e10, peak=1.97e14, bw=8.1e11)
def kernel_time_bounds(flops, nbytes, peak, bw):
    return fm.time_bounds(fm.compute_time(flops, peak), fm.comms_time(nbytes, bw))


@numeric(2, "roofline.arithmetic-intensity", "FLOPs/B", """
    A bf16 matrix multiply takes an activation of shape [{b}, {d}] and a weight of shape [{d}, {f}]
    ({ebytes} bytes per element). Counting 2 FLOPs per multiply-add and the bytes needed to read both
    inputs from HBM and write the output back, what is its arithmetic intensity in FLOPs per byte?""",
    b=512, d=4096, f=16384, ebytes=2)
def matmul_intensity(b, d, f, ebytes):
    return fm.intensity(fm.matmul_flops(b, d, f), fm.matmul_bytes(b, d, f, ebytes))


@numeric(3, ("roofline.matmul", "roofline.arithmetic-intensity"), "tokens", """
    A chip delivers {peak} FLOPs/s of bf16 compute and {bw} bytes/s of HBM bandwidth. Its weights
    are stored in a quantised format using {wbytes} byte per parameter, while the multiply itself
    runs in bf16. For a matmul with a token batch far smaller than both weight dimensions, how many
    tokens must the batch hold at minimum for the matmul to be compute-bound?""",
    peak=1.97e14, bw=8.1e11, wbytes=1)
def quantised_critical_batch(peak, bw, wbytes):
    return fm.critical_batch(peak, bw, wbytes)


@numeric(4, "roofline.arithmetic-intensity", "FLOPs/B", """
    Two vectors of {n} elements each are stored in a format with {ebytes} bytes per element. Their
    dot product needs one multiply per element pair and one fewer additions than elements; both
    vectors are read from memory and a single scalar of the same format is written back. What is
    the arithmetic intensity of the operation in FLOPs per byte?""",
    n=1048576, ebytes=4)
def dot_product_intensity(n, ebytes):
    return fm.intensity(n + (n - 1), 2 * n * ebytes + ebytes)


@numeric(5, "roofline.network", "", """
    Two chips each hold half of the contracting dimension D of a bf16 product between a [B, D] and a
    [D, F] matrix. Each multiplies its halves, then the two exchange their bf16 [B, F] partial sums
    over a link carrying {link} bytes/s in each direction. Each chip computes at {peak} FLOPs/s.
    Ignoring the final addition, above what value of D does the computation stay compute-bound
    rather than bound by the inter-chip link?""",
    link=9e10, peak=4.59e14)
def two_chip_critical_d(link, peak):
    # T_math = 2BDF / (2 C) = BDF / C; T_comms = 2BF / W; equal when D = 2C / W.
    return 2 * peak / link


@numeric(6, "roofline.time-bounds", "s", """
    An fp32 elementwise product of two arrays of {n} elements each writes an fp32 result of the
    same size ({ebytes} bytes per element). It runs on a vector unit with {vpu} FLOPs/s (one FLOP
    per element) fed by {bw} bytes/s of HBM bandwidth. Assuming perfect overlap of loads, stores
    and arithmetic, what is the lower bound on its run time?""",
    n=268435456, ebytes=4, vpu=7e12, bw=2.8e12)
def elementwise_time(n, ebytes, vpu, bw):
    # two arrays read, one written
    return max(fm.compute_time(n, vpu), fm.comms_time(3 * ebytes * n, bw))


@numeric(7, ("roofline.matmul", "roofline.time-bounds"), "s", """
    A bf16 matmul multiplies a [{b}, {d}] activation by a [{d}, {f}] weight on a chip with {peak}
    FLOPs/s and {bw} bytes/s of HBM bandwidth. Counting 2 FLOPs per multiply-add and the traffic of
    reading both inputs and writing the bf16 output once, what is the lower bound on its run time
    when compute and memory traffic overlap perfectly?""",
    b=128, d=8192, f=32768, peak=9.9e14, bw=3.35e12)
def matmul_time_lower(b, d, f, peak, bw):
    lower, _ = fm.time_bounds(
        fm.compute_time(fm.matmul_flops(b, d, f), peak), fm.comms_time(fm.matmul_bytes(b, d, f, 2), bw)
    )
    return lower


@numeric(8, ("roofline.arithmetic-intensity", "roofline.time-bounds"), "%", """
    A kernel has an arithmetic intensity of {ai} FLOPs per byte. On a chip with {peak} FLOPs/s of
    peak compute and {bw} bytes/s of memory bandwidth, what fraction of peak FLOPs/s can it reach
    at best, assuming perfect overlap?""",
    ai=96, peak=9.2e14, bw=1.6e12)
def attainable_fraction(ai, peak, bw):
    return min(1.0, ai * bw / peak)
