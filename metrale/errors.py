"""metrale's exception types: every exception class metrale defines derives from MetraleError."""

from __future__ import annotations


class MetraleError(ValueError):
    """Bad input or a refused operation; the message names the tensor, shape or option."""


class KernelMissing(MetraleError):
    """A named kernel is absent from this backend's build ("missing in this target build")."""


class BackendUnavailable(MetraleError, RuntimeError):
    """A requested backend cannot run here; the message names what is missing (also a
    RuntimeError, as it was before it became a MetraleError)."""


class TpDisagreement(MetraleError):
    """The ranks of a tensor-parallel group disagree on a layer (config, split, format, sizes,
    weights, row count), or one failed to build its part: every rank raises the same message."""


def a_kind(value: object) -> str:
    """``value``'s type name with its article, for messages: "an int", "a str", "a NoneType"."""
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name
