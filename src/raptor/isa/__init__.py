"""The pimsim-nn instruction set: opcodes, the 20-byte record dtype, and the .pim / JSON formats."""

from raptor.isa.opcodes import OPCODE_CLASS, InstClass, Opcode
from raptor.isa.table import INST_DTYPE, concat, empty, make

__all__ = ["INST_DTYPE", "OPCODE_CLASS", "InstClass", "Opcode", "concat", "empty", "make"]
