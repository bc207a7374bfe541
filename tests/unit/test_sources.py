"""Trace sources as plug-ins, and the one owner of the collector's threads.

Every registered source loads under its name; what lists sources (``--source``, the URL
tools of ``--source-url`` and ``eval --from``, the ``source`` setting) is read from the
registry; a source class that lacks ``start`` or ``stop`` is refused when it is defined.
The collector's parts start in order and stop, then close, the other way round; a part
that fails to start leaves nothing running. (A third-party source, installed with pip
and run by ``ragpulse serve --source``, is tests/live/test_third_party_plugins.py.)
"""

from __future__ import annotations

import pytest

from ragpulse.cli import build_parser
from ragpulse.collector.lifecycle import Deadline, Lifecycle
from ragpulse.collector.service import Collector
from ragpulse.config import Settings, load_settings
from ragpulse.errors import ConfigError
from ragpulse.plugin_index import source_urls
from ragpulse.plugins import source_class, source_classes, source_names
from ragpulse.source import Source


@pytest.mark.parametrize("name", source_names())
def test_every_registered_source_loads_under_its_name(name: str) -> None:
    cls = source_class(name)
    assert issubclass(cls, Source) and cls.name == name
    assert cls.options_from(Settings()) is not None  # built-in: its settings where they are


def test_the_sources_that_read_a_url_are_listed_from_their_classes() -> None:
    shapes = {n: c.url_shape for n, c in source_classes().items() if c.url_shape is not None}
    assert source_urls() == shapes
    assert {"phoenix", "mlflow", "langfuse"} <= set(shapes)
    assert shapes["phoenix"] == "phoenix://HOST:PORT/PROJECT"


def test_serve_offers_every_registered_source() -> None:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    [source] = [a for a in serve._actions if a.dest == "source"]
    assert list(source.choices or ()) == source_names()
    assert all(name in (source.help or "") for name in source_urls())


def test_an_unknown_source_is_refused_with_the_closest_name() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(source="kafak")
    said = " ".join(str(caught.value).split())
    names = source_names()
    listed = f"{', '.join(names[:-1])} or {names[-1]}"
    assert f"source: should be a registered source (did you mean kafka?): {listed}" in said
    assert "got 'kafak'" in said


def test_a_source_without_start_or_stop_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="must implement stop"):

        class Half(Source):
            name = "half"

            def start(self) -> None:
                pass

    class Whole(Source):
        name = "whole"

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    assert Whole().close() is None  # nothing to acknowledge by default


class Part:
    def __init__(self, name: str, said: list[str], fail: bool = False) -> None:
        self.name, self._said, self._fail = name, said, fail

    def start(self) -> None:
        if self._fail:
            raise OSError("port in use")
        self._said.append(f"start {self.name}")

    def stop(self, deadline: Deadline) -> None:
        self._said.append(f"stop {self.name}")

    def close(self) -> None:
        self._said.append(f"close {self.name}")


def test_parts_start_in_order_and_stop_then_close_in_reverse() -> None:
    said: list[str] = []
    lifecycle = Lifecycle([Part("sinks", said), Part("workers", said), Part("source", said)])
    lifecycle.start()
    lifecycle.stop(Deadline.within(1.0))
    lifecycle.stop(Deadline.within(1.0))  # a second stop has nothing left to stop
    assert said == [
        "start sinks", "start workers", "start source",
        "stop source", "stop workers", "stop sinks",
        "close source", "close workers", "close sinks",
    ]  # fmt: skip


def test_a_part_that_fails_to_start_leaves_nothing_running() -> None:
    said: list[str] = []
    lifecycle = Lifecycle([Part("sinks", said), Part("source", said, fail=True)])
    with pytest.raises(OSError, match="port in use"):
        lifecycle.start()
    assert said == ["start sinks", "stop sinks", "close sinks"] and not lifecycle.running


def test_the_collector_owns_every_thread_in_one_order() -> None:
    """From the sinks that take exports, through the stages that make them, to the source
    that feeds them, then /metrics (answering means the source listens too)."""
    settings = Settings(otlp_http_port=0, otlp_grpc_port=0, metrics_port=0)
    collector = Collector(settings, evaluators=[], sinks=[])
    assert [p.name for p in collector.lifecycle.parts] == [
        "log redaction", "shared plug-in objects", "sinks", "conversations",
        "export deadlines", "cheap tier", "assembly ticker", "source otlp_http",
        "metrics endpoint",
    ]  # fmt: skip
    with collector:
        assert collector.otlp_url is not None and collector.metrics_url is not None
        assert collector.otlp_grpc_target is None  # port 0: no gRPC receiver
    assert not collector.lifecycle.running
