"""Validation: onnxruntime reference data (reference.py) and comparison verdicts (compare.py)."""

from raptor.validation.reference import ReferenceData, ensure_reference

__all__ = ["ReferenceData", "ensure_reference"]
