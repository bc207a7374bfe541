"""The app side: what an instrumented RAG app imports (through ``import ragpulse``).

Decorators and context managers that write OpenTelemetry spans (:mod:`.instrument`),
the recorders behind them, the tracer provider and its exporters (:mod:`.provider`),
user feedback and the current trace's ids. The collector never imports this package.
"""
