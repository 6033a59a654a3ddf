"""pimsim-nn compatibility rules on hand-made programs (pimsim-nn.md §6, §9)."""

import numpy as np
import pytest

from raptor.arch import load_arch
from raptor.isa.opcodes import Opcode as O
from raptor.isa.pimdir import PimProgram
from raptor.isa.pimsim_rules import check_pimsim_compatible
from raptor.isa.table import concat, empty, make

SETBW = make(O.SETBW, generic1=16, generic2=16)
MVM = make(O.MVMUL, rd=1, r1=0, r2_or_imm=16, generic2=0)


def prog(*cores, agm=None, **meta):
    cores = [concat(list(c)) if isinstance(c, (list, tuple)) else c for c in cores]
    if agm is None:
        agm = [[1] for _ in cores]
    return PimProgram(cores=cores, array_group_map=agm, meta=meta)


def one(problems, needle):
    assert len(problems) == 1, problems
    assert needle in problems[0], problems[0]


def test_clean_program_passes_both_modes():
    p = prog(
        [SETBW, MVM, make(O.SEND, r2_or_imm=1, generic3=32)],
        [make(O.RECV, r2_or_imm=0, generic3=32), make(O.SYNC, r2_or_imm=0, generic1=3)],
        empty(0),
    )
    p.cores[0] = concat([p.cores[0], make(O.WAIT, generic1=3, generic2=1)])
    assert check_pimsim_compatible(p, "latency") == []
    assert check_pimsim_compatible(p, "throughput") == []


def test_mvmul_before_setbw():
    one(check_pimsim_compatible(prog([MVM, SETBW, MVM])), "precedes any setbw")
    # a setbw on another core does not count
    one(check_pimsim_compatible(prog([SETBW, MVM], [MVM])), "core 1: mvmul at instruction 0")


def test_vector_op_before_setbw():
    v = make(O.VRELU, rd=1, r1=2, generic3=8)
    one(check_pimsim_compatible(prog([v, SETBW, v])), "vrelu at instruction 0 precedes any setbw")
    assert check_pimsim_compatible(prog([SETBW, v])) == []


def test_setbw_widths_and_mbiw():
    one(
        check_pimsim_compatible(prog([make(O.SETBW, generic1=0, generic2=8), MVM])),
        "ibiw 0",
    )
    one(
        check_pimsim_compatible(prog([SETBW, make(O.MVMUL, r2_or_imm=0)])),
        "mbiw 0",
    )


def test_nop_anywhere():
    one(check_pimsim_compatible(prog([SETBW, make(O.NOP), MVM])), "nop at instruction 1")
    probs = check_pimsim_compatible(prog([SETBW, MVM, make(O.NOP)]), "latency")
    assert any("nop at instruction 2" in p for p in probs)
    assert any("does not retire through the ROB" in p for p in probs)


@pytest.mark.parametrize(
    "last",
    [make(O.SLDI, rd=1, r2_or_imm=5), make(O.SADDI, rd=1, r1=1, r2_or_imm=5), SETBW],
)
def test_latency_mode_last_instruction(last):
    p = prog([SETBW, MVM, last])
    one(check_pimsim_compatible(p, "latency"), "does not retire through the ROB")
    assert check_pimsim_compatible(p, "throughput") == []


def test_last_lldi_is_fine():
    assert check_pimsim_compatible(prog([make(O.LLDI, r2_or_imm=1, generic3=16)])) == []


def test_registers_and_event_registers():
    one(check_pimsim_compatible(prog([SETBW, make(O.MVMUL, rd=32, r2_or_imm=16)])), "rd=32")
    one(check_pimsim_compatible(prog([make(O.LD, r1=40, generic3=8)])), "rs1=40")
    one(
        check_pimsim_compatible(prog([SETBW, make(O.VVADD, rd=1, r1=2, r2_or_imm=33, generic3=4)])),
        "rs2=33",
    )
    one(
        check_pimsim_compatible(prog([make(O.SYNC, r2_or_imm=0, generic1=32)])),
        "event register 32",
    )
    one(check_pimsim_compatible(prog([make(O.WAIT, generic1=-1, generic2=1)])), "event register -1")


def test_peer_core_ids():
    one(
        check_pimsim_compatible(prog([make(O.SEND, r2_or_imm=2, generic3=4)], [])), "targets core 2"
    )
    one(check_pimsim_compatible(prog([make(O.RECV, r2_or_imm=-1, generic3=4)])), "targets core -1")
    one(check_pimsim_compatible(prog([make(O.SYNC, r2_or_imm=1, generic1=0)])), "targets core 1")


def test_vsoftmax_unsupported():
    one(
        check_pimsim_compatible(prog([SETBW, make(O.VSOFTMAX, rd=1, r1=2, generic3=10)])),
        "unsupported by pimsim-nn",
    )


def test_array_groups_against_arch():
    arch = load_arch("arch-c")  # 8 crossbars per core
    p = prog([SETBW, MVM], agm=[[4, 5]])
    one(check_pimsim_compatible(p, arch=arch), "use 9 crossbars")
    assert check_pimsim_compatible(prog([SETBW, MVM], agm=[[4, 4]]), arch=arch) == []
    # the arch named in config.json's raptor section is used when none is given
    one(check_pimsim_compatible(prog([SETBW, MVM], agm=[[4, 5]], arch="arch-c")), "9 crossbars")
    one(check_pimsim_compatible(prog([SETBW, make(O.MVMUL, r2_or_imm=16, generic2=1)])), "group 1")


def test_core_files_and_counts():
    p = prog([SETBW, MVM], [make(O.LLDI, generic3=4)])
    p.array_group_map = [[1]]
    one(check_pimsim_compatible(p), "array_group_map covers 1 cores")
    p = PimProgram(cores=[empty(0)] * 65, array_group_map=[[]] * 65)
    one(check_pimsim_compatible(p, arch=load_arch("arch-c")), "core_cnt 65 exceeds")
    p = PimProgram(cores=[None], array_group_map=[[]])
    one(check_pimsim_compatible(p), "no instruction file")


def test_bad_opcode_and_mode():
    s = make(O.LLDI, generic3=4)
    s["opcode"] = np.uint8(40)
    one(check_pimsim_compatible(prog([s])), "opcode 40")
    with pytest.raises(ValueError):
        check_pimsim_compatible(prog([SETBW, MVM]), "fast")
