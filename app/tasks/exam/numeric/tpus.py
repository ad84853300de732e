"""TPUs: MXU throughput, memory hierarchy, ICI topology, spec-sheet arithmetic."""

import math

from app.tasks import formulas as fm
from app.tasks.exam.model import collector

QUESTIONS, numeric = collector()


@numeric(1, ("tpus.systolic", "tpus.chip"), "FLOPs/s", """
    Each matrix unit of a chip completes one bf16 product of a [{rows}, {width}] tile with a
    [{width}, {width}] tile every {cycles} clock cycles. The chip has {n_mxu} such units clocked at
    {clock} Hz. Counting 2 FLOPs per multiply-add, what is the chip's peak bf16 throughput?""",
    rows=8, width=128, cycles=8, n_mxu=4, clock=1.2e9)
def mxu_peak(rows, width, cycles, n_mxu, clock):
    return 2 * rows * width * width / cycles * clock * n_mxu


@numeric(2, ("tpus.specs", "tpus.chip"), ("s", "FLOPs"), """
    A chip has {hbm} bytes of HBM, {bw} bytes/s of HBM bandwidth and {peak} bf16 FLOPs/s. How long
    does it take to stream the entire HBM contents through the core once, and how many bf16 FLOPs
    could the chip perform in that same time? (time first, then FLOPs)""",
    hbm=9.6e10, bw=2.8e12, peak=4.59e14)
def hbm_sweep(hbm, bw, peak):
    t = fm.comms_time(hbm, bw)
    return t, t * peak


@numeric(3, "tpus.networking", "hops", """
    A slice is a {x}x{y} two-dimensional torus with wraparound links on both axes, and each chip
    talks only to its nearest neighbours. What is the largest number of ICI hops a message needs
    between any two chips?""",
    x=16, y=8)
def torus_max_hops(x, y):
    return fm.torus_diameter(x, y)


@numeric(4, ("tpus.bandwidths", "tpus.networking"), "", """
    A chip moves {nbytes} bytes to its neighbours using {links} ICI links of {link} bytes/s each
    at once; the same transfer to another pod goes over DCN at {dcn} bytes/s per chip. By what
    factor is the DCN transfer slower?""",
    nbytes=1e9, links=4, link=9e10, dcn=6.25e9)
def dcn_slowdown(nbytes, links, link, dcn):
    return fm.comms_time(nbytes, dcn) / fm.comms_time(nbytes, links * link)


@numeric(5, "tpus.chip", "FLOPs/B", """
    On-chip vector memory feeds the matrix units at {ratio} times the chip's HBM bandwidth of {bw}
    bytes/s, and the chip peaks at {peak} FLOPs/s. What arithmetic intensity must a matmul whose
    operands live entirely in vector memory exceed to be compute-bound?""",
    ratio=22, bw=8.1e11, peak=1.97e14)
def vmem_intensity(ratio, bw, peak):
    return peak / (ratio * bw)


@numeric(6, "tpus.specs", "FLOPs/s", """
    A slice is a {x}x{y}x{z} arrangement of chips, each with {peak} bf16 FLOPs/s. What is the
    slice's aggregate peak bf16 throughput?""",
    x=16, y=16, z=24, peak=4.59e14)
def pod_flops(x, y, z, peak):
    return x * y * z * peak


@numeric(7, "tpus.systolic", "%", """
    A weight matrix of shape [{rows}, {cols}] is multiplied on a {tile}x{tile} systolic array, so
    each dimension is padded up to the next multiple of {tile}. What fraction of the padded array's
    multiply-adds do useful work?""",
    rows=200, cols=1000, tile=128)
def padding_utilisation(rows, cols, tile):
    return rows * cols / (math.ceil(rows / tile) * tile * (math.ceil(cols / tile) * tile))


@numeric(8, ("tpus.bandwidths", "tpus.networking"), "s", """
    A model with {params} parameters, stored at {bpp} bytes per parameter, is loaded from host RAM
    and split evenly across {chips} chips; each chip has its own PCIe link of {pcie} bytes/s. If
    all links run in parallel, how long does loading take?""",
    params=7e10, bpp=2, chips=64, pcie=1.6e10)
def pcie_load_time(params, bpp, chips, pcie):
    return fm.comms_time(params * bpp / chips, pcie)
