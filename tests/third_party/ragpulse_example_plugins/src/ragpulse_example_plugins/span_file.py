"""``span_file``: a trace source that reads spans from a file as it grows, one JSON span a
line (``ragpulse.record.Span``'s fields)."""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import Field

from ragpulse.plugin_context import PluginOptions
from ragpulse.record import Span
from ragpulse.source import Source, SourceContext


class SpanFileSource(Source):
    name = "span_file"

    class Options(PluginOptions):  # sources.span_file
        path: Path = Field(description="the file, one JSON span a line, read as it grows")
        poll_s: float = Field(0.2, gt=0, description="how often new lines are looked for")

    options: Options

    def __init__(self, options: PluginOptions, context: SourceContext) -> None:
        super().__init__(options, context)
        self._intake = context.intake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="span-file", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        read = 0  # bytes of whole lines taken so far
        while not self._stop.wait(self.options.poll_s):
            if not self.options.path.exists():
                continue
            with self.options.path.open("rb") as file:
                file.seek(read)
                lines = [line for line in file if line.endswith(b"\n")]  # a whole line each
            read += sum(map(len, lines))
            spans = [Span.model_validate_json(line) for line in lines if line.strip()]
            if spans:
                self._intake.ingest(spans)
