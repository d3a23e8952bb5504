"""Errors that the CLI turns into a one-line message and a non-zero exit."""


class HybridperfError(Exception):
    """Any user-facing error: bad input, unknown device or op, a broken model bundle."""


class InputError(HybridperfError):
    """The user's data or arguments are malformed (missing column, NaN, negative latency...)."""


class UnknownDeviceError(HybridperfError):
    """A device name that is neither in the catalog nor a readable JSON spec."""


class UnknownOpError(HybridperfError):
    """An op name the predictor does not model."""


class ModelBundleError(HybridperfError):
    """A model bundle that is missing, tampered with, or inconsistent with its manifest."""


class SpecError(UnknownDeviceError):
    """A device or node spec whose field has the wrong type, unit or range (0 SMs, NaN bandwidth)."""
