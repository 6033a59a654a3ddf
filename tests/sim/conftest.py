"""Fixtures for simulator tests: PIMCOMP's pimsim-nn config as an Arch (helpers: simprog.py), a
small compiled model with its traced run."""

import pytest
from simprog import pimcomp_arch

from raptor.arch import load_arch
from raptor.compiler import compile_to_dir
from raptor.isa.pimdir import read_pimdir
from raptor.models import save_model
from raptor.options import CompileOptions
from raptor.sim import simulate


@pytest.fixture
def arch():
    return pimcomp_arch()


@pytest.fixture(scope="session")
def vgg8_tp(tmp_path_factory):
    """vgg8 at 16x16 compiled by Raptor for arch-a (host-memory dataflow), throughput pipeline 2,
    and its traced run
    (send/recv, sync/wait, ld/st, two rounds): (dir, arch, program, report)."""
    d = tmp_path_factory.mktemp("vgg8")
    model = save_model("vgg8", d / "vgg8.onnx", input_size=16)
    arch = load_arch("arch-a")
    # the host-memory dataflow: with the NoC dataflow vgg8 has no cross-core host edge and so no
    # sync/wait; here row-group partial sums still travel by send/recv
    opts = CompileOptions(mode="throughput", pipeline=2, disable_noc_dataflow=True)
    compile_to_dir(model, arch, opts, d / "out")
    prog = read_pimdir(d / "out" / "pim")
    return d, arch, prog, simulate(prog, arch, mode="throughput", pipeline=2, trace=True)
