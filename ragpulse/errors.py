"""Every exception ragpulse raises; vendor errors are mapped where they enter."""

from __future__ import annotations


class RagpulseError(Exception):
    """Base of all ragpulse errors."""


class ConfigError(RagpulseError):
    """Configuration is invalid; the message says how to fix it."""


class DecodeError(RagpulseError):
    """An OTLP payload could not be decoded (bad protobuf, bad JSON, bad gzip)."""


class PayloadTooLarge(DecodeError):
    """A body (or its decompressed form) exceeds the configured size limit."""


class UnsupportedMediaType(DecodeError):
    """The Content-Type / Content-Encoding is not one OTLP/HTTP allows."""


class ModelUnavailable(RagpulseError):
    """A model (or the extra it needs) cannot be loaded; the message says the fix."""
