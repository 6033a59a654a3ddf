"""Raptor-py: an ONNX to ReRAM-crossbar processing-in-memory compiler and simulator."""

__version__ = "0.1.0"
