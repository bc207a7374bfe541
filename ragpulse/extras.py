"""What each install extra brings, and the one line that installs it when a part is missing.

``pip install ragpulse`` is the SDK: the decorators, ``ragpulse.configure`` and the
OTLP/HTTP exporter, which is what an instrumented app imports (the OpenTelemetry SDK and
exporter, nothing else). The rest comes with extras:

- ``collector``: every ``ragpulse`` command (``serve``, ``eval``, ``demo``...), the
  stored-trace sources, the evaluators and sinks, and ``ragpulse.Document``,
  ``RagRecord``, ``EvalResult`` and ``@ragpulse.evaluator`` (pydantic models);
- ``kafka``: the app-side Kafka span exporter (``configure(exporter="kafka")``);
- ``redis``: the LLM judge's cache shared by collector replicas (``redis://`` caches);
- ``models``, ``onnx``, ``train``: the local-model tier, its ONNX runtime, probe training.

Standard library only: the SDK and the command's first line import it.
"""

from __future__ import annotations

import importlib.util

MODULES: dict[str, tuple[str, ...]] = {
    "collector": (
        "pydantic", "pydantic_settings", "yaml", "rich", "prometheus_client", "aiohttp",
        "httpx", "grpc", "openai", "hyperscan", "kafka", "google.protobuf",
    ),
    "kafka": ("kafka",),
    "redis": ("redis",),
}  # fmt: skip
"""The modules each extra installs that ragpulse imports (their top-level names)."""


class MissingExtra(ImportError):
    """A part of ragpulse whose extra is not installed; the message says the install line."""


def install_line(extra: str) -> str:
    return f"pip install 'ragpulse[{extra}]'"


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (none when it is installed)."""
    absent = []
    for name in MODULES[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is absent (google of google.protobuf)
            found = False
        if not found:
            absent.append(name)
    return absent


def needs(extra: str, what: str, absent: list[str] | None = None) -> str:
    """``"ragpulse serve needs the collector extra: pip install 'ragpulse[collector]'"``,
    naming the absent modules when given."""
    more = f" and {len(absent) - 3} more" if absent and len(absent) > 3 else ""
    without = f" (not installed: {', '.join(absent[:3])}{more})" if absent else ""
    return f"{what} needs the {extra} extra{without}: {install_line(extra)}"


def extra_of(module: str | None) -> str | None:
    """The extra that installs ``module`` (a missing module's name), if one does."""
    if not module:
        return None
    for extra in ("kafka", "redis", "collector"):  # the narrowest extra first
        names = MODULES[extra]
        if any(module == m or module.startswith(m + ".") or m.startswith(module + ".")
               for m in names):  # fmt: skip
            return extra
    return None
