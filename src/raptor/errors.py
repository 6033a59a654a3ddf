"""Error types. Every user-facing failure is a RaptorError whose message is one line."""


class RaptorError(Exception):
    """Base class of every error the CLI reports as one line and a non-zero exit."""


class ModelError(RaptorError):
    """An ONNX file that cannot be read or fails the import gate (frontend/gate.py)."""


class UnsupportedOpError(RaptorError):
    """An ONNX op (or attribute combination) the compiler cannot map."""


class IRVerifyError(RaptorError):
    """An IR failed its verifier."""


class PassFailedError(RaptorError):
    """A compiler pass could not complete (e.g. the model does not fit the chip)."""


class PimFormatError(RaptorError):
    """A malformed pim/ directory, .pim binary or instruction JSON."""


class ArchConfigError(RaptorError):
    """A malformed or inconsistent architecture file."""


class SimulationError(RaptorError):
    """The simulator hit an invalid state (deadlock, bad address, missing weights)."""


class TargetMismatchError(RaptorError):
    """A program asked to run on a chip, mode or pipeline it was not compiled for, or on a chip
    it does not fit."""
