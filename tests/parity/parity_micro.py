"""Hand-built micro-programs for pimsim-nn parity, each with the arch it runs on and, where
pimsim-nn.md §5/§9 gives one, the figure pimsim-nn must produce.

The arches: `pimcomp` is PIMCOMP-NN's default hardware config for pimsim-nn as our arch file
(arch-a's timing and energy with 136 cores on a 12x12 mesh and 64 crossbars per core, rob_size 1);
`iso` zeroes the local-memory latencies and the memory static powers (pimsim-nn.md §5);
`rob8` sets rob_size 8. Every program carries weights and a host memory so our engine can run it
for values too.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import pytest

from raptor.arch.loader import Arch, parse_arch
from raptor.isa.opcodes import Opcode as O
from raptor.isa.pimdir import PimProgram
from raptor.isa.table import concat, empty, make

HOST_VALUES = 1 << 16


def _base() -> dict:
    return json.loads(resources.files("raptor.arch").joinpath("arch-a.json").read_text())


def make_arch(variant: str = "pimcomp") -> Arch:
    d = _base()
    d["name"] = f"parity-{variant}"
    d["cores_per_chip"] = 136
    d["core_layout"] = [12, 12]
    d["core"]["matrix"]["xbar_array_count"] = 64
    if variant == "iso":
        d["core"]["local_memory"].update(
            read_latency_cycle=0, write_latency_cycle=0, static_power=0
        )
        d["global_memory"]["static_power"] = 0
    elif variant == "rob8":
        d["core"]["rob_size"] = 8
    elif variant != "pimcomp":
        raise ValueError(variant)
    return parse_arch(copy.deepcopy(d), f"<parity {variant}>")


@dataclass
class Micro:
    name: str
    prog: PimProgram
    arch: str = "pimcomp"  # make_arch variant, or a built-in arch name
    mode: str = "latency"
    pipeline: int = 1
    sim_time_ms: float | None = None
    # pimsim-nn figures from pimsim-nn.md (None: not documented; measured values live in the tests)
    doc: dict[str, float] = field(default_factory=dict)

    def get_arch(self) -> Arch:
        if self.arch.startswith("arch-"):
            from raptor.arch import load_arch

            return load_arch(self.arch)
        return make_arch(self.arch)


def setbw(bits: int) -> np.ndarray:
    return make(O.SETBW, generic1=bits, generic2=bits)


def sldi(reg: int, value: int) -> np.ndarray:
    return make(O.SLDI, rd=reg, r2_or_imm=value)


def mvmul(rd: int = 0, rs1: int = 0, bits: int = 8, group: int = 0) -> np.ndarray:
    return make(O.MVMUL, rd=rd, r1=rs1, r2_or_imm=bits, generic2=group)


def program(
    cores: list[list[np.ndarray]],
    agm: list[list[int]] | None = None,
    bits: int = 8,
) -> PimProgram:
    """A PimProgram with one weight matrix (128 x crossbars*128*2/bits) per array group."""
    streams = [concat(c) if c else empty(0) for c in cores]
    agm = agm if agm is not None else [[] for _ in cores]
    rng = np.random.default_rng(0)
    mats: list[np.ndarray] = []
    agw: list[list[int]] = []
    for groups in agm:
        ids = []
        for xb in groups:
            mats.append(rng.standard_normal((128, xb * 128 * 2 // bits)).astype(np.float32))
            ids.append(len(mats) - 1)
        agw.append(ids)
    mem = rng.standard_normal(HOST_VALUES).astype(np.float32)
    return PimProgram(
        cores=streams,
        array_group_map=agm,
        weight_matrices=mats,
        array_group_weights=agw,
        memory=mem,
        meta={"element_bytes": 2, "compiler": "raptor", "mode": "latency", "pipeline": 1},
    )


def one_mvm(bits: int = 8, crossbars: int = 1) -> PimProgram:
    return program([[setbw(bits), mvmul(bits=bits)]], [[crossbars]], bits)


def two_mvm(disjoint: bool) -> PimProgram:
    """Two 8-bit MVMs on different array groups; disjoint: separate local ranges (set by sldi)."""
    if disjoint:
        body = [
            setbw(8),
            sldi(1, 0),
            sldi(2, 4096),
            sldi(3, 8192),
            sldi(4, 12288),
            mvmul(rd=3, rs1=1, group=0),
            mvmul(rd=4, rs1=2, group=1),
        ]
    else:
        body = [setbw(8), mvmul(group=0), mvmul(group=1)]
    return program([body], [[1, 1]])


def vector_ops(bits: int | None = 16) -> PimProgram:
    """Vector ops; pimsim-nn sizes their local-memory traffic by setbw's widths (none: 0 bytes)."""
    head = [setbw(bits)] if bits else []
    return program(
        [
            head
            + [
                sldi(1, 0),
                sldi(2, 1024),
                sldi(3, 2048),
                sldi(4, 1),
                make(O.VVADD, rd=3, r1=1, r2_or_imm=2, generic3=64),
                make(O.VRELU, rd=3, r1=3, generic3=100),
                make(O.VVMAX, rd=1, r1=2, r2_or_imm=3, generic3=33),
                make(O.VVMUL, rd=2, r1=1, r2_or_imm=3, generic3=32),
                make(O.VMV, rd=3, r1=1, r2_or_imm=4, generic3=16),
            ]
        ],
        [[]],
    )


def ld_st() -> PimProgram:
    return program(
        [
            [
                sldi(1, 0),
                sldi(2, 4096),
                make(O.LD, rd=1, r1=2, generic3=256),
                make(O.ST, rd=2, r1=1, generic3=100),
            ]
        ],
        [[]],
    )


def lldi_lmv() -> PimProgram:
    return program(
        [
            [
                sldi(1, 0),
                sldi(2, 512),
                make(O.LLDI, rd=1, r2_or_imm=3, generic3=128),
                make(O.LMV, rd=2, r1=1, generic3=128),
            ]
        ],
        [[]],
    )


def lldi_only() -> PimProgram:
    return program([[sldi(1, 0), make(O.LLDI, rd=1, r2_or_imm=1, generic3=16)]], [[]])


def send_recv(dst: int, size: int, cores: int | None = None) -> PimProgram:
    n = cores or dst + 1
    streams: list[list[np.ndarray]] = [[] for _ in range(n)]
    streams[0] = [make(O.SEND, rd=0, r2_or_imm=dst, generic3=size)]
    streams[dst] = [make(O.RECV, rd=0, r2_or_imm=0, generic3=size)]
    return program(streams, [[] for _ in range(n)])


def sync_wait() -> PimProgram:
    return program(
        [
            [make(O.LLDI, rd=0, r2_or_imm=2, generic3=64), make(O.SYNC, r2_or_imm=1, generic1=3)],
            [make(O.WAIT, generic1=3, generic2=1), make(O.LLDI, rd=0, r2_or_imm=5, generic3=256)],
        ],
        [[], []],
    )


def deadlock() -> PimProgram:
    return program(
        [
            [make(O.RECV, r2_or_imm=1, generic3=32), make(O.SEND, r2_or_imm=1, generic3=32)],
            [make(O.RECV, r2_or_imm=0, generic3=32), make(O.SEND, r2_or_imm=0, generic3=32)],
        ],
        [[], []],
    )


def ld_mvm_st() -> PimProgram:
    body = [
        setbw(8),
        sldi(1, 0),
        make(O.LD, rd=1, r1=1, generic3=256),
        mvmul(bits=8),
        make(O.ST, rd=1, r1=1, generic3=32),
    ]
    return program([body], [[1]])


def micros() -> list[Micro]:
    """Every micro-program, with the pimsim-nn.md figures where the note gives them."""
    return [
        Micro("mvm8", one_mvm(8), doc={"latency_ns": 1661, "energy_pj": 27812.24}),
        Micro("mvm16", one_mvm(16), doc={"latency_ns": 3277, "energy_pj": 55534.48}),
        Micro("mvm8_ag2", one_mvm(8, 2), doc={"latency_ns": 1661, "energy_pj": 52302.48}),
        Micro("mvm16_ag4", one_mvm(16, 4)),
        Micro("mvm8_iso", one_mvm(8), "iso", doc={"latency_ns": 1312, "energy_pj": 24490.24}),
        Micro("mvm16_iso", one_mvm(16), "iso", doc={"latency_ns": 2608, "energy_pj": 48980.48}),
        Micro("two_mvm_rob1", two_mvm(False), doc={"latency_ns": 3319}),
        Micro("two_mvm_rob8_shared", two_mvm(False), "rob8", doc={"latency_ns": 3319}),
        Micro("two_mvm_rob1_disjoint", two_mvm(True)),
        # pimsim-nn.md §9.8 gives 1.984 us for its own disjoint program; ours has one more sldi
        Micro("two_mvm_rob8_disjoint", two_mvm(True), "rob8"),
        Micro("vector16", vector_ops(16)),
        Micro("vector8", vector_ops(8)),
        Micro("vector_no_setbw", vector_ops(None)),
        Micro("ld_st", ld_st()),
        Micro("lldi_lmv", lldi_lmv()),
        Micro("lldi_only", lldi_only()),
        Micro("send_1hop", send_recv(1, 128), doc={"latency_ns": 128, "energy_pj": 660}),
        Micro("send_14hop_1k", send_recv(135, 1024)),
        Micro("send_interchip", send_recv(4, 256), "arch-c"),
        Micro("sync_wait", sync_wait()),
        Micro(
            "tp_mvm8",
            one_mvm(8),
            mode="throughput",
            pipeline=604,
            sim_time_ms=1.0,
            doc={
                "rounds": 604,
                "average_latency_ns": 1655.629139,
                "energy_per_round_pj": 27760.95152,
            },
        ),
        Micro("tp_ld_mvm_st", ld_mvm_st(), mode="throughput", pipeline=200, sim_time_ms=0.5),
    ]


# ---- test markers ------------------------------------------------------------------------------
def _have_pimsim() -> bool:
    import os

    path = os.environ.get("PIMSIM_NN_BIN", "")
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def _have_ours() -> bool:
    try:
        from raptor.sim import simulate  # noqa: F401
    except ImportError:
        return False
    return True


HAVE_PIMSIM = _have_pimsim()
HAVE_OURS = _have_ours()
needs_pimsim = pytest.mark.skipif(
    not HAVE_PIMSIM,
    reason="PIMSIM_NN_BIN does not name a ChipTest binary (.ci/run builds one from "
    "../shared/tools/build-pimsim-nn.sh when it exists)",
)
needs_ours = pytest.mark.skipif(not HAVE_OURS, reason="raptor.sim is not importable yet")
