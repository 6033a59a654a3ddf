"""Helpers for simulator tests: PIMCOMP's pimsim-nn config as an Arch, and program builders."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from raptor.arch.loader import parse_arch
from raptor.isa.opcodes import Opcode
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import concat, make

# reference/pimcomp_hw_config.json expressed in our arch format (mesh 12x12, 2h+2 ns, 46 pJ/flit)
PIMCOMP_ARCH = {
    "name": "pimcomp-default",
    "description": "PIMCOMP-NN default pimsim-nn config",
    "chips": 1,
    "chip_layout": [1, 1],
    "cores_per_chip": 136,
    "core_layout": [12, 12],
    "weight_bits": 8,
    "activation_bits": 8,
    "core": {
        "period": 1,
        "rob_size": 1,
        "vector_width": 32,
        "vector_latency_cycle": 4,
        "local_memory": {
            "memory_size": 1048576,
            "data_width": 64,
            "period": 1,
            "read_latency_cycle": 20,
            "write_latency_cycle": 30,
        },
        "matrix": {
            "xbar_array_count": 64,
            "period": 1,
            "pipeline_mode": True,
            "dac_resolution": 1,
            "dac_latency_cycle": 1,
            "dac_count": 128,
            "xbar_size": [128, 128],
            "cell_precision": 2,
            "xbar_latency": 7,
            "xbar_read_power": 22.24,
            "sample_hold_latency_cycle": 1,
            "adc_resolution": 8,
            "adc_latency_cycle": 20,
            "adc_static_power": 0.322,
            "adc_dynamic_power": 1.135,
            "adc_count": 16,
            "shift_adder_latency_cycle": 1,
            "output_buffer_latency_cycle": 1,
        },
    },
    "global_memory": {
        "memory_size": 1048576,
        "data_width": 32,
        "period": 1,
        "read_latency_cycle": 40,
        "write_latency_cycle": 50,
    },
    "noc": {
        "topology": "mesh",
        "bus_width": 32,
        "base_latency_ns": 2,
        "hop_latency_ns": 2,
        "flit_energy_pj": 46,
        "global_memory_latency_ns": 15,
    },
}


def arch_with(**core_overrides):
    d = copy.deepcopy(PIMCOMP_ARCH)
    d["core"].update(core_overrides)
    return parse_arch(d, "pimcomp-test")


def I(op: Opcode, **kw) -> np.ndarray:  # noqa: E743 - one instruction
    return make(op, **kw)


def sldi(rd: int, imm: int) -> np.ndarray:
    return make(Opcode.SLDI, rd=rd, r2_or_imm=imm)


def setbw(ibiw: int = 8, obiw: int = 8) -> np.ndarray:
    return make(Opcode.SETBW, generic1=ibiw, generic2=obiw)


def mvmul(rd: int, rs1: int, group: int = 0, mbiw: int = 8, relu: int = 0) -> np.ndarray:
    return make(Opcode.MVMUL, rd=rd, r1=rs1, r2_or_imm=mbiw, generic1=relu, generic2=group)


def vop(op: Opcode, rd: int, rs1: int, rs2: int, length: int) -> np.ndarray:
    return make(op, rd=rd, r1=rs1, r2_or_imm=rs2, generic3=length)


def ld(rd: int, rs1: int, size: int) -> np.ndarray:
    return make(Opcode.LD, rd=rd, r1=rs1, generic3=size)


def st(rd: int, rs1: int, size: int) -> np.ndarray:
    return make(Opcode.ST, rd=rd, r1=rs1, generic3=size)


def send(rd: int, core: int, size: int) -> np.ndarray:
    return make(Opcode.SEND, rd=rd, r2_or_imm=core, generic3=size)


def recv(rd: int, core: int, size: int) -> np.ndarray:
    return make(Opcode.RECV, rd=rd, r2_or_imm=core, generic3=size)


def sync(ev: int, core: int) -> np.ndarray:
    return make(Opcode.SYNC, r2_or_imm=core, generic1=ev)


def wait(ev: int, val: int) -> np.ndarray:
    return make(Opcode.WAIT, generic1=ev, generic2=val)


def program(
    cores: list[list[np.ndarray]], agm=None, weights=None, agw=None, memory=None, meta=None
) -> PimProgram:
    streams = [concat(blocks) for blocks in cores]
    n = len(streams)
    return PimProgram(
        cores=streams,
        array_group_map=agm if agm is not None else [[] for _ in range(n)],
        weight_matrices=weights or [],
        array_group_weights=agw if agw is not None else [[] for _ in range(n)],
        memory=np.zeros(0, np.float32) if memory is None else np.asarray(memory, np.float32),
        meta={"element_bytes": 1, **(meta or {})},
    )


def dump(path: Path, obj) -> None:  # pragma: no cover - debugging aid
    path.write_text(json.dumps(obj, indent=1))


def pimcomp_arch():
    return parse_arch(copy.deepcopy(PIMCOMP_ARCH), "pimcomp-test")
