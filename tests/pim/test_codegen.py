"""Format rules pimsim-nn imposes on emitted programs."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from toy import ARCH_TINY, toy_inception, toy_resnet  # noqa: E402

from raptor.arch import load_arch
from raptor.compiler import compile_model
from raptor.isa.opcodes import OPCODE_CLASS, InstClass, Opcode
from raptor.options import CompileOptions


@pytest.mark.parametrize("plan", [True, False])
@pytest.mark.parametrize("model", [toy_resnet, toy_inception])
def test_program_rules(model, plan):
    arch = load_arch(str(ARCH_TINY))
    opts = CompileOptions(mode="throughput", pipeline=3, disable_spatial_planning=not plan)
    prog = compile_model(model(), arch, opts).program
    prog.verify()
    assert prog.meta["compiler"] == "raptor" and prog.meta["pipeline"] == 3
    nonempty = [s for s in prog.cores if len(s)]
    assert nonempty
    for s in nonempty:
        assert s[0]["opcode"] == Opcode.SETBW and s[0]["generic1"] == arch.activation_bits
        assert (s["opcode"] != Opcode.NOP).all()
        assert (s["rd"] < 32).all() and (s["r1"] < 32).all()
        last = Opcode(int(s[-1]["opcode"]))
        assert OPCODE_CLASS[last] not in (InstClass.SCALAR, InstClass.SETBW, InstClass.NOP)
        mv = s[s["opcode"] == Opcode.MVMUL]
        assert (mv["r2_or_imm"] == arch.weight_bits).all()
        vec = np.isin(s["opcode"], [op for op, c in OPCODE_CLASS.items() if c == InstClass.VECTOR])
        assert (s["r2_or_imm"][vec] < 32).all() and (s["generic3"][vec] > 0).all()
    for ags in prog.array_group_map:
        assert sum(ags) <= arch.crossbars_per_core
    assert (
        prog.meta["inputs"][0]["layout"] == "NHWC" and prog.meta["outputs"][0]["layout"] == "flat"
    )


def test_replicas_share_weight_matrices():
    arch = load_arch(str(ARCH_TINY))
    prog = compile_model(toy_resnet(hw=16), arch, CompileOptions()).program
    used = [m for mats in prog.array_group_weights for m in mats]
    assert len(set(used)) == len(prog.weight_matrices) < len(used)
