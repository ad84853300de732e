"""Profiling: turning trace timings into utilisation, bandwidth and memory figures."""

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, "profiling.profiler", "%", """
    A trace shows a bf16 matmul fusion of a [{b}, {d}] activation with a [{d}, {f}] weight taking
    {t} s on a chip with {peak} FLOPs/s. What fraction of peak FLOPs/s did it achieve?""",
    b=8192, d=8192, f=32768, t=0.0245, peak=1.97e14)
def fusion_flops_utilisation(b, d, f, t, peak):
    return fm.matmul_flops(b, d, f) / t / peak


@numeric(2, "profiling.profiler", "%", """
    An elementwise fusion in the trace reads and writes {nbytes} bytes in total and takes {t} s.
    With {bw} bytes/s of memory bandwidth available, what fraction of it did the fusion use?""",
    nbytes=2.4e9, t=0.0033, bw=8.1e11)
def fusion_bandwidth_utilisation(nbytes, t, bw):
    return nbytes / t / bw


@numeric(3, "profiling.profiler", "%", """
    A training step of a {params}-parameter model on a batch of {tokens} tokens takes {step} s on
    {chips} chips of {peak} FLOPs/s according to the profile. Using 6 FLOPs per parameter per
    token, what model FLOPs utilisation does the step reach?""",
    params=7e9, tokens=1048576, step=0.75, chips=256, peak=4.59e14)
def step_mfu(params, tokens, step, chips, peak):
    return fm.training_flops(params, tokens) / (step * chips * peak)


@numeric(4, ("profiling.memory", "profiling.profiler"), "B", """
    The memory profile of an FSDP run over {chips} chips shows parameters at {pbytes} bytes and
    optimizer state at {obytes} bytes per parameter, all fully sharded. For a {params}-parameter
    model, how many bytes of that state sit on each chip?""",
    chips=256, pbytes=2, obytes=8, params=7e9)
def state_per_chip(chips, pbytes, obytes, params):
    return params * (pbytes + obytes) / chips


@numeric(5, ("profiling.profiler", "sharding.allgather-reducescatter"), "%", """
    A reduce-scatter op in the trace moves an array of {nbytes} bytes over a ring and takes {t} s.
    The ring's links are rated at {w} bytes/s bidirectionally. What fraction of the rated bandwidth
    did the collective achieve?""",
    nbytes=6.7e7, t=0.00081, w=9e10)
def collective_efficiency(nbytes, t, w):
    return fm.allgather_time(nbytes, w) / t


@numeric(6, ("profiling.hlo", "profiling.profiler"), "", """
    An HLO dot of a bf16[{b},{d}] operand with a bf16[{d},{f}] operand appears in the trace taking
    {t} s on a chip with {peak} FLOPs/s. How many times slower than its compute-bound ideal is it?""",
    b=256, d=4096, f=4096, t=0.00011, peak=1.97e14)
def dot_slowdown(b, d, f, t, peak):
    return t / fm.compute_time(fm.matmul_flops(b, d, f), peak)


@numeric(7, ("profiling.memory", "training.memory"), "B", """
    A compiled program's memory viewer lists {layers} saved activations per layer, each a bf16
    array ({b} bytes per element) of shape [{tokens}, {d}], for {n} layers. How many bytes do
    these activations take?""",
    layers=4, b=2, tokens=65536, d=5120, n=40)
def saved_activations(layers, b, tokens, d, n):
    return layers * b * tokens * d * n


@numeric(8, ("profiling.hlo", "profiling.memory"), ("B", "devices"), """
    In an HLO dump, a reduce-scatter's operand type reads bf16[{a},{b},{c}] and it scatters the
    last dimension; its replica groups list {groups} groups of {size} device ids each. Each bf16
    element takes {nbytes} bytes. How many bytes does the result occupy on one device, and over how
    many devices does the whole program run?""",
    a=32, b=32, c=8192, groups=4, size=2, nbytes=2)
def hlo_result_bytes(a, b, c, groups, size, nbytes):
    # Each device keeps 1 / size of the scattered dimension; the groups partition the devices.
    return a * b * (c / size) * nbytes, groups * size



# ---- reading a real trace --------------------------------------------------------------------

@numeric(21, ("profiling.profiler",), "", """
    A trace of one training step on one chip shows, back to back: matmul fusions for {matmul} s,
    an all-gather that nothing overlaps for {ag} s, a reduce-scatter of {rs} s that runs entirely
    underneath the matmul fusions, and idle gaps totalling {idle} s. What fraction of the step is
    exposed communication?""",
    matmul=0.08, ag=0.012, rs=0.009, idle=0.004)
def exposed_comms_fraction(matmul, ag, rs, idle):
    return ag / (matmul + ag + idle)  # the overlapped reduce-scatter adds no time


@numeric(22, ("profiling.profiler", "applied-training.duration"), "", """
    The trace viewer shows a training step of {step} s on {chips} chips of {peak} FLOPs/s. The
    model has {params} parameters and the step trains on {tokens} tokens, at 6 FLOPs per parameter
    per token. What model FLOPs utilisation does the trace show (a fraction)?""",
    step=2.5, chips=64, peak=4.59e14, params=8e9, tokens=1048576)
def mfu_from_trace(step, chips, peak, params, tokens):
    return fm.training_flops(params, tokens) / (chips * peak * step)


@numeric(23, ("profiling.profiler", "profiling.hlo"), "B/s", """
    In a trace, an all-reduce whose HLO operand is f32[{rows},{cols}] ({eb} bytes per element)
    takes {seconds} s. Measured as the operand's bytes over the op's duration, what bandwidth does
    it reach?""",
    rows=8192, cols=4096, eb=4, seconds=0.002)
def trace_allreduce_bandwidth(rows, cols, eb, seconds):
    return eb * rows * cols / seconds
