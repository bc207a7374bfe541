"""The environment variables an instrumented app reads (``ragpulse.configure``).

Constants only, no imports: the app side (:mod:`ragpulse.sdk.config`) reads them, and
the collector's settings check (:mod:`ragpulse.settings_env`) knows them, so that
setting one where both run is never refused as a typo.
"""

ENV_SERVICE_NAME = "RAGPULSE_SERVICE_NAME"
ENV_OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
"""Fallback for the service name when ``RAGPULSE_SERVICE_NAME`` is unset."""
ENV_ENDPOINT = "RAGPULSE_ENDPOINT"
"""Base URL of the OTLP/HTTP receiver; ``/v1/traces`` is appended."""
ENV_API_TOKEN = "RAGPULSE_API_TOKEN"
"""Sent as ``Authorization: Bearer <token>`` unless headers carry their own."""
ENV_EXPORTER = "RAGPULSE_EXPORTER"
"""``otlp`` (default), ``kafka``, ``console`` or ``none``."""
ENV_KAFKA_BOOTSTRAP = "RAGPULSE_KAFKA__BOOTSTRAP"
"""Kafka ``host:port[,...]`` for ``exporter="kafka"`` (same variable as the collector's)."""
ENV_KAFKA_TOPIC = "RAGPULSE_KAFKA__TOPIC"
"""Topic for ``exporter="kafka"`` (same variable as the collector's)."""
ENV_EXPORT_TIMEOUT = "RAGPULSE_EXPORT_TIMEOUT"
"""Seconds one OTLP export (retries included) may take."""
ENV_CAPTURE_CONTENT = "RAGPULSE_CAPTURE_CONTENT"
"""``true``/``false``: record question, document and answer texts."""
ENV_MAX_TEXT_CHARS = "RAGPULSE_MAX_TEXT_CHARS"
"""Longest recorded text, in characters; longer texts are cut."""
ENV_MAX_DOCUMENTS = "RAGPULSE_MAX_DOCUMENTS"
"""Most documents recorded per retrieval span."""
