"""Transfer unit and NoC (pimsim-nn `TransferUnit`, `Switch`, `Network`).

A message of `size` bytes from src to dst costs ceil(size / bus_width) flits x the per-flit link
latency (`raptor.arch.timing.link_latency_ns`) and flits x the per-flit energy. Each source
switch serialises its outgoing messages (no router or link contention beyond that). ld sends a
1-byte request to global memory (the response is free, as in pimsim-nn); st ships `size` bytes.
send/recv is a rendezvous: sender_ready (1 flit) -> receiver_ready (1 flit, once the receiver is
at its recv) -> sender reads local memory and ships `size` bytes -> receiver writes local memory;
the send completes once its data is queued on the switch. sync sends 1 flit and takes one cycle;
wait blocks until the event register reaches its value, then subtracts it.
"""

from __future__ import annotations

import math

from raptor.arch.loader import Arch
from raptor.arch.timing import chip_hops, link_energy_pj, link_latency_ns


class Noc:
    """Link cost cache, per-source switch queues and flit/energy counters."""

    def __init__(self, arch: Arch, n_cores: int) -> None:
        self.arch = arch
        self.gm = arch.noc.global_memory_switch_id
        self.bus = arch.noc.bus_width
        self.switch_free = [0.0] * n_cores
        self._link: dict[tuple[int, int], tuple[float, float, int, float]] = {}
        self.flits = 0
        self.energy_pj = 0.0
        self.inter_chip_bytes = 0  # bytes that crossed a chip boundary (flits x bus width)
        self.inter_chip_energy_pj = 0.0
        self.log: list | None = None  # traced runs: (start, arrival, bytes) per message
        self.timeline = None  # an EnergyTimeline charged with each message's energy at its start

    def link(self, src: int, dst: int) -> tuple[float, float, int, float]:
        key = (src, dst)
        c = self._link.get(key)
        if c is None:
            c = (
                link_latency_ns(self.arch, src, dst),
                link_energy_pj(self.arch, src, dst),
                chip_hops(self.arch, src, dst),
                link_energy_pj(self.arch, src, dst) - self.arch.noc.flit_energy_pj,
            )
            self._link[key] = c
        return c

    def nflits(self, size_bytes: int) -> int:
        return max(1, math.ceil(size_bytes / self.bus)) if size_bytes > 0 else 0

    def message(
        self, t: float, src: int, dst: int, size_bytes: int, hold_extra: float = 0.0
    ) -> float:
        """Queue a message on src's switch at time t; returns its arrival time at dst. The switch
        stays busy until arrival + hold_extra."""
        lat, e, ch, ech = self.link(src, dst)
        k = self.nflits(size_bytes)
        if ch:
            self.inter_chip_bytes += k * self.bus
            self.inter_chip_energy_pj += k * ech
        free = self.switch_free[src]
        start = t if t > free else free
        arrival = start + k * lat
        self.switch_free[src] = arrival + hold_extra
        self.flits += k
        self.energy_pj += k * e
        if self.timeline is not None:
            self.timeline.add(start, k * e)
        if self.log is not None:
            self.log.append((start, arrival, k * self.bus))
        return arrival
