"""metrale's exception types."""

from __future__ import annotations


class MetraleError(ValueError):
    """Bad input or a refused operation; the message names the tensor, shape or option."""


class KernelMissing(MetraleError):
    """A named kernel is absent from this backend's build ("missing in this target build")."""


class BackendUnavailable(RuntimeError):
    """A requested backend cannot run here; the message names what is missing."""
