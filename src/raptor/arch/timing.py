"""Unit cost formulas of pimsim-nn (latency in ns, energy in pJ), shared by the simulator, the
compilers' cost models and the bounds.

Sources: pimsim-nn `XbarArray.cpp` / `ArrayGroup.cpp` (MVM), `VectorUnit.cpp`, `Memory.cpp`,
`Network.cpp`; reference figures in PIMCOMP notes §3.4-3.5. Integer divisions that pimsim-nn
rounds up are rounded up here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from raptor.arch.loader import Arch, MemoryConfig


@dataclass(frozen=True)
class MvmCost:
    cycles: int
    latency_ns: float
    energy_per_crossbar_pj: float


def mvm_cost(arch: Arch, input_bits: int) -> MvmCost:
    """Compute latency and per-crossbar energy of one MVM at `input_bits` input width."""
    m = arch.matrix
    input_times = math.ceil(input_bits / m.dac_resolution)
    dac_times = math.ceil(m.rows / m.dac_count)
    adc_times = math.ceil(m.cols / m.adc_count)
    xbar_read = math.ceil(m.xbar_latency / m.period)
    front = (
        m.input_buffer_latency_cycle + m.dac_latency_cycle + xbar_read + m.sample_hold_latency_cycle
    )
    back = (
        m.adc_latency_cycle
        + m.shift_adder_latency_cycle
        + m.output_buffer_latency_cycle
        + (adc_times - 1)
        * max(m.adc_latency_cycle, m.shift_adder_latency_cycle + m.output_buffer_latency_cycle)
    )
    passes = input_times * dac_times
    if m.pipeline_mode:
        cycles = front + back + (passes - 1) * max(front, back)
    else:
        cycles = (front + back) * passes
    p = m.period
    front_e = (
        p * m.input_buffer_dynamic_power * m.input_buffer_latency_cycle
        + p * m.dac_dynamic_power * m.dac_latency_cycle * m.dac_count
        + m.xbar_read_power * m.xbar_latency
        + p * m.sample_hold_dynamic_power * m.sample_hold_latency_cycle * m.cols
    )
    back_e = adc_times * (
        p * m.adc_dynamic_power * m.adc_latency_cycle * m.adc_count
        + p * m.shift_adder_dynamic_power * m.shift_adder_latency_cycle
        + p * m.output_buffer_dynamic_power * m.output_buffer_latency_cycle
    )
    return MvmCost(
        cycles=cycles, latency_ns=cycles * p, energy_per_crossbar_pj=passes * (front_e + back_e)
    )


def mvm_local_read_bytes(arch: Arch, rows: int, input_bits: int) -> int:
    """Bytes an MVM reads from local memory: pimsim-nn reads xbar rows * input bytes * 8
    ("for compare with mnsim"), whatever the number of rows actually used."""
    return arch.matrix.rows * math.ceil(input_bits / 8) * 8


def mvm_local_write_bytes(arch: Arch, crossbars: int, weight_bits: int, output_bits: int) -> int:
    """Bytes an MVM writes to local memory: (cols * cell_precision / mbiw) * output bytes per crossbar."""
    m = arch.matrix
    return (m.cols * m.cell_precision // weight_bits) * math.ceil(output_bits / 8) * crossbars


def memory_latency_ns(mem: MemoryConfig, size_bytes: int, write: bool) -> float:
    beats = math.ceil(size_bytes / mem.data_width)
    cycles = mem.write_latency_cycle if write else mem.read_latency_cycle
    return beats * cycles * mem.period


def memory_energy_pj(mem: MemoryConfig, size_bytes: int, write: bool) -> float:
    beats = math.ceil(size_bytes / mem.data_width)
    return beats * (mem.write_dynamic_energy if write else mem.read_dynamic_energy)


def vector_compute_ns(arch: Arch, length: int) -> float:
    """Vector unit compute time: ceil(len / width) * latency cycles (added as ns, as pimsim-nn)."""
    return math.ceil(length / arch.core.vector_width) * arch.core.vector_latency_cycle


def vector_energy_pj(arch: Arch, length: int) -> float:
    c = arch.core
    times = math.ceil(length / c.vector_width)
    return times * (
        c.vector_alu_dynamic_energy + 2 * c.vector_reg_read_energy + c.vector_reg_write_energy
    )


def flits(arch: Arch, size_bytes: int) -> int:
    return math.ceil(size_bytes / arch.noc.bus_width)


def link_latency_ns(arch: Arch, src: int, dst: int) -> float:
    """Per-flit latency between two cores (or a core and global memory, id = switch id)."""
    n = arch.noc
    if src == n.global_memory_switch_id or dst == n.global_memory_switch_id:
        core = dst if src == n.global_memory_switch_id else src
        gm_chips = global_memory_chip_hops(arch, core)
        lat = n.global_memory_latency_ns
        if gm_chips:
            ic = arch.inter_chip
            lat += gm_chips * (ic.latency_ns + n.bus_width / ic.bandwidth_gb_per_s)
        return lat
    hops, n_chip = arch.hops(src, dst)
    lat = n.base_latency_ns + n.hop_latency_ns * hops
    if n_chip and arch.inter_chip is not None:
        ic = arch.inter_chip
        lat += n_chip * (ic.latency_ns + n.bus_width / ic.bandwidth_gb_per_s)
    return lat


def global_memory_chip_hops(arch: Arch, core: int) -> int:
    """Chip-to-chip hops between a core and the global memory, which sits at chip 0."""
    if arch.chips <= 1 or arch.inter_chip is None or core < 0:
        return 0
    py, px = arch.chip_position(arch.core_position(core)[0])
    return py + px


def chip_hops(arch: Arch, src: int, dst: int) -> int:
    """Chip-to-chip hops of a message (either end may be the global memory)."""
    gm = arch.noc.global_memory_switch_id
    if src == gm or dst == gm:
        return global_memory_chip_hops(arch, dst if src == gm else src)
    if arch.chips <= 1:
        return 0
    return arch.hops(src, dst)[1]


def link_energy_pj(arch: Arch, src: int, dst: int) -> float:
    """Per-flit energy between two endpoints (mesh flat 46 pJ; inter-chip adds link energy, also
    between a core and the global memory on chip 0)."""
    n = arch.noc
    e = n.flit_energy_pj
    if arch.inter_chip is not None and (
        src == n.global_memory_switch_id or dst == n.global_memory_switch_id
    ):
        ic = arch.inter_chip
        hops = chip_hops(arch, src, dst)
        return e + hops * ic.link_power_mw * (n.bus_width / ic.bandwidth_gb_per_s) / 1000.0
    if (
        src != n.global_memory_switch_id
        and dst != n.global_memory_switch_id
        and arch.inter_chip is not None
    ):
        _, n_chip = arch.hops(src, dst)
        if n_chip:
            ic = arch.inter_chip
            e += n_chip * ic.link_power_mw * (n.bus_width / ic.bandwidth_gb_per_s) / 1000.0
    return e


def link_costs(
    arch: Arch, src: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For every pair (src[k], dst[k]) at once, the same floats as link_latency_ns,
    link_energy_pj and chip_hops give one pair at a time: (per-flit latency ns, per-flit energy
    pJ, chip-to-chip hops, per-flit energy beyond the flat flit energy)."""
    n, ic = arch.noc, arch.inter_chip
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    gm = n.global_memory_switch_id
    to_gm = (src == gm) | (dst == gm)
    # chip hops between a core and the global memory (global_memory_chip_hops)
    core = np.where(src == gm, dst, src)
    gm_chips = np.zeros(len(src), np.int64)
    if arch.chips > 1 and ic is not None:
        py, px = np.divmod(core // arch.cores_per_chip, arch.chip_layout[1])
        gm_chips = np.where(core < 0, 0, py + px)
    # mesh and chip-to-chip hops between two cores (Arch.hops)
    ca, la = np.divmod(src, arch.cores_per_chip)
    cb, lb = np.divmod(dst, arch.cores_per_chip)
    ya, xa = np.divmod(la, arch.core_layout[1])
    yb, xb = np.divmod(lb, arch.core_layout[1])
    pya, pxa = np.divmod(ca, arch.chip_layout[1])
    pyb, pxb = np.divmod(cb, arch.chip_layout[1])
    same = ca == cb
    hops = np.where(same, np.abs(ya - yb) + np.abs(xa - xb), (ya + xa) + (yb + xb))
    n_chip = np.where(same, 0, np.abs(pya - pyb) + np.abs(pxa - pxb))

    lat = n.base_latency_ns + n.hop_latency_ns * hops
    e = np.full(len(src), n.flit_energy_pj)
    if ic is not None:
        per_chip = ic.latency_ns + n.bus_width / ic.bandwidth_gb_per_s
        lat = np.where(n_chip > 0, lat + n_chip * per_chip, lat)
        gm_lat = np.where(
            gm_chips > 0,
            n.global_memory_latency_ns + gm_chips * per_chip,
            n.global_memory_latency_ns,
        )
        ratio = n.bus_width / ic.bandwidth_gb_per_s
        e_gm = n.flit_energy_pj + gm_chips * ic.link_power_mw * ratio / 1000.0
        e_mesh = np.where(n_chip > 0, e + n_chip * ic.link_power_mw * ratio / 1000.0, e)
        e = np.where(to_gm, e_gm, e_mesh)
    else:
        gm_lat = np.full(len(src), n.global_memory_latency_ns)
    lat = np.where(to_gm, gm_lat, lat)
    chips = np.where(to_gm, gm_chips, n_chip if arch.chips > 1 else 0)
    return lat, e, chips, e - n.flit_energy_pj
