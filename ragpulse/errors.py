"""Every exception ragpulse raises; vendor errors are mapped where they enter."""

from __future__ import annotations

import errno

__all__ = ["ConfigError", "ModelUnavailable", "RagpulseError"]
"""What a plug-in or an app meets; the rest are the collector's own."""


class RagpulseError(Exception):
    """Base of all ragpulse errors."""


class ConfigError(RagpulseError):
    """Configuration is invalid; the message says how to fix it."""


class OptionsError(ConfigError):
    """A plug-in's options (a sink's ``sinks.<name>``, an evaluator's
    ``evaluation.options.<name>``) do not validate. ``problems`` holds one
    ``(key path below the plug-in's options, what is wrong, hint)`` each, so that the
    settings report can name each key where it was written."""

    def __init__(self, message: str, problems: list[tuple[tuple[str, ...], str, str]]) -> None:
        super().__init__(message)
        self.problems = problems


class DecodeError(RagpulseError):
    """An OTLP payload could not be decoded (bad protobuf, bad JSON, bad gzip)."""


class PayloadTooLarge(DecodeError):
    """A body (or its decompressed form) exceeds the configured size limit."""


class UnsupportedMediaType(DecodeError):
    """The Content-Type / Content-Encoding is not one OTLP/HTTP allows."""


class CollectorFull(RagpulseError):
    """The collector holds as much as its bounds allow: nothing of the request was
    accepted, and the sender should retry after ``retry_after_s`` (HTTP 503 with
    Retry-After, gRPC UNAVAILABLE with RetryInfo; a Kafka message waits).

    ``bound`` names what is full: ``open_traces``, ``held_bytes`` or ``backlog``.
    """

    RETRY_AFTER_S = 1

    def __init__(self, bound: str) -> None:
        super().__init__(f"collector full ({bound}), retry later")
        self.bound = bound
        self.retry_after_s = self.RETRY_AFTER_S


class BackendError(RagpulseError):
    """A tracing tool that ragpulse reads stored traces from (Phoenix, MLflow, Langfuse)
    refused a request or answered with something unusable; the message names the tool
    and its URL (never credentials) and says the fix where there is one."""


class BackendUnreachable(BackendError):
    """The tool did not answer (network error, 408, 429, 5xx) for as long as retries
    were allowed; ``ragpulse eval --from`` exits 2, follow mode counts it and polls again."""


class BackendRefused(BackendError):
    """The tool answered a request with a refusal that retrying cannot fix (4xx other than
    408, 425, 429); ``status`` is its HTTP status (404: the project or trace is not there)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelUnavailable(RagpulseError):
    """A model (or the extra it needs) cannot be loaded; the message says the fix."""


class PortUnavailable(ConfigError):
    """A listening port cannot be bound; the message names the flag and setting that move it.

    ``main`` prints a ConfigError as one line and exits 2, so a port in use costs the
    operator one line instead of a traceback from deep inside the HTTP server.
    """

    def __init__(
        self, host: str, port: int, purpose: str, flag: str, setting: str, error: OSError
    ) -> None:
        env = "RAGPULSE_" + setting.upper().replace(".", "__")
        move = f"choose another with {flag} or {setting} / {env}"
        if error.errno == errno.EADDRINUSE:
            message = f"port {port} ({purpose}) is in use on {host}: {move}"
        else:
            reason = error.strerror or str(error)
            message = (
                f"cannot listen on {host}:{port} ({purpose}): {reason}; check --host, or {move}"
            )
        super().__init__(message)
        self.host, self.port, self.purpose = host, port, purpose
