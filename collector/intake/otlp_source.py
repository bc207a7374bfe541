"""``otlp_http``: the embedded OTLP receivers, the default source.

The OTLP/HTTP receiver (:mod:`.otlp_http`) and, unless ``otlp_grpc_port`` is 0, the
OTLP/gRPC one (:mod:`.otlp_grpc`): the same intake, limits, token and backpressure on
both. Options: the top-level ``host``, ``otlp_http_port``, ``otlp_grpc_port``,
``auth_token`` and ``max_body_bytes`` (``ragpulse serve --host``, ``--otlp-http-port``,
...). A port that cannot be bound stops the start with
:class:`~ragpulse.errors.PortUnavailable`, naming the flag that moves it.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from ragpulse.collector.intake.otlp_grpc import OtlpGrpcReceiver
from ragpulse.collector.intake.otlp_http import OtlpHttpReceiver
from ragpulse.config import Settings
from ragpulse.errors import PortUnavailable
from ragpulse.options import PluginOptions
from ragpulse.source import Source, SourceContext


class OtlpOptions(PluginOptions):
    """The receivers' settings, read from the settings' top level (validated there too)."""

    host: str = "127.0.0.1"
    otlp_http_port: int = Field(4318, ge=0, le=65535)
    otlp_grpc_port: int = Field(4317, ge=0, le=65535)
    auth_token: SecretStr | None = None
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)


class OtlpSource(Source):
    """``otlp_http``: the OTLP/HTTP receiver, and the OTLP/gRPC one unless its port is 0;
    options: the receivers' top-level keys (``host``, ``otlp_http_port``, ...)."""

    name = "otlp_http"
    Options = OtlpOptions
    options: OtlpOptions

    def __init__(self, options: PluginOptions, context: SourceContext) -> None:
        super().__init__(options, context)
        o = self.options
        token = o.auth_token.get_secret_value() if o.auth_token else None
        self.receiver = OtlpHttpReceiver(
            context.intake, context.metrics, host=o.host, port=o.otlp_http_port,
            max_body_bytes=o.max_body_bytes, auth_token=token,
        )  # fmt: skip
        self.grpc_receiver: OtlpGrpcReceiver | None = None
        if o.otlp_grpc_port:  # 0 = no gRPC receiver
            self.grpc_receiver = OtlpGrpcReceiver(
                context.intake, context.metrics, host=o.host, port=o.otlp_grpc_port,
                max_body_bytes=o.max_body_bytes, auth_token=token,
            )  # fmt: skip

    @classmethod
    def options_from(cls, settings: Settings) -> OtlpOptions:
        return OtlpOptions(
            host=settings.host,
            otlp_http_port=settings.otlp_http_port,
            otlp_grpc_port=settings.otlp_grpc_port,
            auth_token=settings.auth_token,
            max_body_bytes=settings.max_body_bytes,
        )

    def start(self) -> None:
        o = self.options
        try:
            self.receiver.start()
        except OSError as exc:
            raise PortUnavailable(
                o.host, o.otlp_http_port, "OTLP/HTTP receiver", "--otlp-http-port",
                "otlp_http_port", exc,
            ) from exc  # fmt: skip
        if self.grpc_receiver is None:
            return
        try:
            self.grpc_receiver.start()
        except OSError as exc:
            self.receiver.stop()
            raise PortUnavailable(
                o.host, o.otlp_grpc_port, "OTLP/gRPC receiver", "--otlp-grpc-port",
                "otlp_grpc_port", exc,
            ) from exc  # fmt: skip

    def stop(self) -> None:
        self.receiver.stop()
        if self.grpc_receiver is not None:
            self.grpc_receiver.stop()

    @property
    def url(self) -> str:
        """The OTLP/HTTP receiver's base URL (``/v1/traces`` below it), once started."""
        return self.receiver.url

    @property
    def grpc_target(self) -> str | None:
        """``host:port`` of the OTLP/gRPC receiver, when it runs."""
        return self.grpc_receiver.target if self.grpc_receiver is not None else None

    def describe(self) -> list[str]:
        lines = [f"OTLP/HTTP receiver on {self.url}/v1/traces"]
        if self.grpc_target is not None:
            lines.append(f"OTLP/gRPC receiver on {self.grpc_target}")
        return lines
