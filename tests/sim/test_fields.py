"""Register and event-register numbers are checked before a program runs (one-line
SimulationError); an exception while running is a simulator bug and is not disguised."""

import pytest
from simprog import program, setbw, sldi, vop, wait

from raptor.errors import SimulationError
from raptor.isa.opcodes import Opcode
from raptor.sim import simulate


@pytest.mark.parametrize(
    "bad,pc",
    [
        ([sldi(40, 0)], 1),  # destination register 40 of 32
        ([vop(Opcode.VVADD, 3, 1, 33, 8)], 1),  # second operand register 33
        ([vop(Opcode.VRELU, 3, 1, -1, 8)], 1),  # a negative register number
        ([sldi(1, 0), wait(32, 1)], 2),  # event register 32 of 32
    ],
)
def test_out_of_range_register_is_a_simulation_error(arch, bad, pc):
    prog = program([[setbw(), *bad]])
    with pytest.raises(SimulationError) as e:
        simulate(prog, arch)
    msg = str(e.value)
    assert msg.startswith(f"core 0 pc {pc} (")
    assert msg.endswith("): register number out of range (32 registers, 32 events)")
    assert "\n" not in msg


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_engine_bug_is_not_reported_as_a_bad_program(arch, monkeypatch, engine):
    """An exception inside the engine reaches the caller as it is (the CLI then reports an
    internal error), not as the user's invalid instruction (vsigm: numpy computes it in both
    engines)."""

    def apply(*args):
        raise IndexError("engine bug")

    monkeypatch.setattr("raptor.sim.vector.apply", apply)
    prog = program([[setbw(), sldi(1, 0), sldi(2, 64), vop(Opcode.VSIGM, 2, 1, 1, 8)]])
    with pytest.raises(IndexError, match="engine bug"):
        simulate(prog, arch, engine=engine)
