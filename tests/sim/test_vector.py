"""Vector unit values and timing (pimsim-nn VectorUnit: reads + ceil(len/width) x cycles + write)."""

import numpy as np
import pytest
from simprog import program, setbw, sldi, vop

from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.sim import simulate
from raptor.sim.engine import Engine
from raptor.sim.memory import HostMemory


def run(prog, arch, init):
    eng = Engine(prog, arch, 1, HostMemory(prog.memory, 1, [], [], 1))
    for addr, values in init.items():
        eng.cores[0].local[addr : addr + len(values)] = values
    eng.run()
    return eng


def test_vvadd_timing(arch):
    prog = program(
        [[setbw(), sldi(1, 0), sldi(2, 64), sldi(3, 128), vop(Opcode.VVADD, 3, 1, 2, 64)]]
    )
    # dispatch at cycle 6; 2 reads x 20 + ceil(64/32) x 4 + write 30 = 78; +2 retire (vector)
    assert simulate(prog, arch).latency_ns == 6 + 78 + 2


@pytest.mark.parametrize(
    "op,fn",
    [
        (Opcode.VVADD, lambda a, b: a + b),
        (Opcode.VVSUB, lambda a, b: a - b),
        (Opcode.VVMUL, lambda a, b: a * b),
        (Opcode.VVMAX, np.maximum),
        (Opcode.VRELU, lambda a, b: np.maximum(a, 0)),
        (Opcode.VTANH, lambda a, b: np.tanh(a)),
        (Opcode.VSIGM, lambda a, b: 1 / (1 + np.exp(-a))),
    ],
)
def test_elementwise_values(arch, op, fn):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    prog = program([[setbw(), sldi(1, 0), sldi(2, 64), sldi(3, 128), vop(op, 3, 1, 2, 40)]])
    eng = run(prog, arch, {0: a, 64: b})
    np.testing.assert_allclose(eng.cores[0].local[128:168], fn(a, b), rtol=1e-6, atol=1e-7)


def test_vmv_gather_and_vavg(arch):
    a = np.arange(32, dtype=np.float32)
    prog = program(
        [
            [
                setbw(),
                sldi(1, 0),
                sldi(2, 4),
                sldi(3, 100),
                sldi(4, 200),
                vop(Opcode.VMV, 3, 1, 2, 8),
                vop(Opcode.VAVG, 4, 1, 2, 8),
            ]
        ]
    )
    local = run(prog, arch, {0: a}).cores[0].local
    np.testing.assert_array_equal(local[100:108], a[::4])
    assert local[200] == pytest.approx(a[::4].mean())


def test_zero_length_and_out_of_range_are_errors(arch):
    with pytest.raises(SimulationError, match="core 0 pc 1 .*vector length 0"):
        simulate(program([[setbw(), vop(Opcode.VRELU, 0, 0, 0, 0)]]), arch)
    with pytest.raises(SimulationError, match="out of range"):
        simulate(program([[setbw(), sldi(1, 1 << 20), vop(Opcode.VRELU, 1, 0, 0, 8)]]), arch)
