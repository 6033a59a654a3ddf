"""Load and validate an architecture file into frozen config dataclasses.

The file's `core`, `core.matrix`, `core.local_memory` and `global_memory` sections use the key
names of pimsim-nn's `Config.hpp` (so the pimsim-nn export is mechanical); `noc` states the mesh
rule (per-flit latency base + hop * hops ns, fixed pJ per flit) instead of a table.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from raptor.errors import ArchConfigError

BUILTIN = ("arch-a", "arch-b", "arch-c")


@dataclass(frozen=True)
class MatrixConfig:
    """Crossbar matrix unit (pimsim-nn `MatrixUnitConfig`); latencies in cycles of `period` ns."""

    xbar_array_count: int
    period: float
    pipeline_mode: bool
    dac_resolution: int
    dac_latency_cycle: int
    dac_count: int
    xbar_size: tuple[int, int]
    cell_precision: int
    xbar_latency: float
    xbar_read_power: float
    sample_hold_latency_cycle: int
    adc_resolution: int
    adc_latency_cycle: int
    adc_static_power: float
    adc_dynamic_power: float
    adc_count: int
    shift_adder_latency_cycle: int
    output_buffer_latency_cycle: int
    input_buffer_latency_cycle: int = 0
    dac_dynamic_power: float = 0.0
    sample_hold_dynamic_power: float = 0.0
    shift_adder_dynamic_power: float = 0.0
    input_buffer_dynamic_power: float = 0.0
    output_buffer_dynamic_power: float = 0.0
    # pimsim-nn reads these too (Config.hpp defaults 0) but never charges them: its
    # `XbarArray::getStaticPower` is unused, so crossbar-side static power costs nothing there.
    dac_static_power: float = 0.0
    sample_hold_static_power: float = 0.0
    shift_adder_static_power: float = 0.0
    input_buffer_static_power: float = 0.0
    output_buffer_static_power: float = 0.0

    @property
    def rows(self) -> int:
        return self.xbar_size[0]

    @property
    def cols(self) -> int:
        return self.xbar_size[1]


@dataclass(frozen=True)
class MemoryConfig:
    """A scratchpad or global memory (pimsim-nn `MemoryConfig`)."""

    memory_size: int
    data_width: int
    period: float
    read_latency_cycle: int
    write_latency_cycle: int
    static_power: float = 1.0
    read_dynamic_energy: float = 0.0
    write_dynamic_energy: float = 0.0


@dataclass(frozen=True)
class CoreConfig:
    period: float
    rob_size: int
    vector_width: int
    vector_latency_cycle: int
    local_memory: MemoryConfig
    matrix: MatrixConfig
    vector_alu_dynamic_energy: float = 0.0
    vector_reg_read_energy: float = 0.0
    vector_reg_write_energy: float = 0.0
    # Per-unit powers pimsim-nn's core charges (Config.hpp `CoreConfig`, all default 0): static
    # power in mW for the whole run, dynamic power in mW per active cycle of `period`.
    vector_alu_static_power: float = 0.0
    vector_reg_static_power: float = 0.0
    controller_static_power: float = 0.0
    controller_dynamic_power: float = 0.0
    inst_fetch_static_power: float = 0.0
    inst_fetch_dynamic_power: float = 0.0
    inst_decode_static_power: float = 0.0
    inst_decode_dynamic_power: float = 0.0
    inst_decode_offset_static_power: float = 0.0
    inst_decode_offset_dynamic_power: float = 0.0
    reg_file_static_power: float = 0.0
    reg_file_read_dynamic_power: float = 0.0
    reg_file_write_dynamic_power: float = 0.0
    scalar_static_power: float = 0.0
    scalar_dynamic_power: float = 0.0
    transfer_static_power: float = 0.0
    transfer_dynamic_power: float = 0.0


@dataclass(frozen=True)
class NocConfig:
    topology: str
    bus_width: int
    base_latency_ns: float
    hop_latency_ns: float
    flit_energy_pj: float
    global_memory_latency_ns: float
    global_memory_switch_id: int = -10


@dataclass(frozen=True)
class InterChipConfig:
    bandwidth_gb_per_s: float
    latency_ns: float
    link_power_mw: float


@dataclass(frozen=True)
class Arch:
    """A chip (or multi-chip system) description with derived figures."""

    name: str
    description: str
    chips: int
    chip_layout: tuple[int, int]
    cores_per_chip: int
    core_layout: tuple[int, int]
    weight_bits: int
    activation_bits: int
    core: CoreConfig
    global_memory: MemoryConfig
    noc: NocConfig
    inter_chip: InterChipConfig | None = None
    source: str = ""

    # ---- derived figures -------------------------------------------------------------
    @property
    def core_count(self) -> int:
        return self.chips * self.cores_per_chip

    @property
    def matrix(self) -> MatrixConfig:
        return self.core.matrix

    @property
    def crossbars_per_core(self) -> int:
        return self.core.matrix.xbar_array_count

    @property
    def slices_per_weight(self) -> int:
        """Physical crossbar columns one weight occupies (weight bits / cell bits)."""
        return math.ceil(self.weight_bits / self.matrix.cell_precision)

    @property
    def weights_per_crossbar_row(self) -> int:
        """Logical weight columns one physical crossbar holds (pimsim: cols*cell/mbiw)."""
        return self.matrix.cols // self.slices_per_weight

    @property
    def crossbar_weight_capacity(self) -> int:
        return self.matrix.rows * self.weights_per_crossbar_row

    @property
    def element_bytes(self) -> int:
        return math.ceil(self.activation_bits / 8)

    @property
    def total_crossbars(self) -> int:
        return self.core_count * self.crossbars_per_core

    def crossbars_for(self, rows: int, cols: int) -> int:
        """Physical crossbars needed for a rows x cols matrix of weights at weight_bits."""
        return math.ceil(rows / self.matrix.rows) * math.ceil(cols / self.weights_per_crossbar_row)

    def core_position(self, core: int) -> tuple[int, int, int]:
        """(chip, y, x) of a core; core ids are chip-major, row-major inside a chip."""
        chip, local = divmod(core, self.cores_per_chip)
        y, x = divmod(local, self.core_layout[1])
        return chip, y, x

    def chip_position(self, chip: int) -> tuple[int, int]:
        return divmod(chip, self.chip_layout[1])

    def hops(self, a: int, b: int) -> tuple[int, int]:
        """(on-chip mesh hops, chip-to-chip hops) between cores a and b."""
        ca, ya, xa = self.core_position(a)
        cb, yb, xb = self.core_position(b)
        if ca == cb:
            return abs(ya - yb) + abs(xa - xb), 0
        (pya, pxa), (pyb, pxb) = self.chip_position(ca), self.chip_position(cb)
        # leave chip a at its edge, cross chips, enter chip b from its edge: bound by layout size
        on_chip = (ya + xa) + (yb + xb)
        return on_chip, abs(pya - pyb) + abs(pxa - pxb)

    @cached_property
    def summary(self) -> dict[str, Any]:
        m = self.matrix
        return {
            "name": self.name,
            "description": self.description,
            "chips": self.chips,
            "cores": self.core_count,
            "crossbars_per_core": self.crossbars_per_core,
            "crossbar_size": f"{m.rows}x{m.cols}",
            "cell_bits": m.cell_precision,
            "weight_bits": self.weight_bits,
            "activation_bits": self.activation_bits,
            "weights_per_crossbar": self.crossbar_weight_capacity,
            "physical_crossbars": self.total_crossbars,
            "logical_crossbars_128x128": self.total_crossbars
            * self.crossbar_weight_capacity
            // (128 * 128),
            "weight_capacity": self.total_crossbars * self.crossbar_weight_capacity,
            "local_memory_bytes": self.core.local_memory.memory_size,
            "rob_size": self.core.rob_size,
        }


def _build(cls, data: dict[str, Any], where: str):
    names = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ArchConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
    kwargs = {}
    for name, f in names.items():
        if name not in data and (f.default is not MISSING or f.default_factory is not MISSING):
            continue
        value = data.get(name)
        if isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ArchConfigError(f"{where}: {e}") from None


def parse_arch(data: dict[str, Any], source: str = "<dict>") -> Arch:
    """Build and validate an Arch from its JSON object."""
    if not isinstance(data, dict):
        raise ArchConfigError(f"{source}: architecture file must hold a JSON object")
    try:
        core = dict(data["core"])
        matrix = _build(MatrixConfig, core.pop("matrix"), f"{source}: core.matrix")
        local = _build(MemoryConfig, core.pop("local_memory"), f"{source}: core.local_memory")
        core_cfg = _build(
            CoreConfig, {**core, "matrix": matrix, "local_memory": local}, f"{source}: core"
        )
        gmem = _build(MemoryConfig, data["global_memory"], f"{source}: global_memory")
        noc = _build(NocConfig, data["noc"], f"{source}: noc")
        inter = data.get("inter_chip")
        inter_cfg = _build(InterChipConfig, inter, f"{source}: inter_chip") if inter else None
        top = {
            k: v for k, v in data.items() if k not in ("core", "global_memory", "noc", "inter_chip")
        }
        arch = _build(
            Arch,
            {
                **top,
                "core": core_cfg,
                "global_memory": gmem,
                "noc": noc,
                "inter_chip": inter_cfg,
                "source": source,
            },
            source,
        )
    except KeyError as e:
        raise ArchConfigError(f"{source}: missing section {e.args[0]!r}") from None
    _validate(arch)
    return arch


def _validate(a: Arch) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ArchConfigError(f"{a.source}: {msg}")

    m = a.matrix
    need(a.chips >= 1 and a.cores_per_chip >= 1, "chips and cores_per_chip must be >= 1")
    need(
        a.chip_layout[0] * a.chip_layout[1] >= a.chips,
        f"chip_layout {a.chip_layout} holds fewer than {a.chips} chips",
    )
    need(
        a.core_layout[0] * a.core_layout[1] >= a.cores_per_chip,
        f"core_layout {a.core_layout} holds fewer than {a.cores_per_chip} cores",
    )
    need(
        a.chips == 1 or a.inter_chip is not None,
        "a multi-chip architecture needs an inter_chip section",
    )
    need(m.xbar_array_count >= 1, "core.matrix.xbar_array_count must be >= 1")
    need(m.rows >= 1 and m.cols >= 1, "core.matrix.xbar_size must be positive")
    need(
        m.cell_precision >= 1 and a.weight_bits % m.cell_precision == 0,
        "weight_bits must be a multiple of cell_precision",
    )
    need(m.cols % a.slices_per_weight == 0, "crossbar columns must hold whole weights")
    need(a.activation_bits in (8, 16, 32), "activation_bits must be 8, 16 or 32")
    need(
        m.dac_resolution >= 1 and m.dac_count >= 1 and m.adc_count >= 1,
        "DAC/ADC counts and resolution must be >= 1",
    )
    need(m.period > 0 and a.core.period > 0, "periods must be positive")
    need(a.core.rob_size >= 1, "core.rob_size must be >= 1")
    need(a.core.vector_width >= 1, "core.vector_width must be >= 1")
    for name, mem in (
        ("core.local_memory", a.core.local_memory),
        ("global_memory", a.global_memory),
    ):
        need(
            mem.data_width >= 1 and mem.memory_size >= 1,
            f"{name}: data_width and memory_size must be >= 1",
        )
    need(a.noc.bus_width >= 1, "noc.bus_width must be >= 1")


def load_arch(name_or_path: str | Path) -> Arch:
    """Load a built-in architecture by name (arch-a, arch-b, arch-c) or a JSON file by path."""
    key = str(name_or_path)
    if key in BUILTIN:
        text = resources.files("raptor.arch").joinpath(f"{key}.json").read_text()
        source = key
    else:
        path = Path(key)
        if not path.is_file():
            raise ArchConfigError(
                f"unknown architecture {key!r}: not one of {', '.join(BUILTIN)} and no such file"
            )
        text = path.read_text()
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArchConfigError(f"{source}: malformed JSON ({e.msg} at line {e.lineno})") from None
    return parse_arch(data, source)
