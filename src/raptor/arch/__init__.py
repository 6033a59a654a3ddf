"""Architecture descriptions (arch-a, arch-b, arch-c or a user file) and unit cost formulas."""

from raptor.arch.loader import Arch, load_arch

__all__ = ["Arch", "load_arch"]
