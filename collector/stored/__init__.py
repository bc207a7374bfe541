"""Stored traces: what teams already keep in a tracing tool, read back and scored.

``ragpulse eval --from phoenix://HOST:PORT/PROJECT`` (or ``mlflow://HOST:PORT/ID``,
``langfuse://HOST:PORT``) reads the traces of a time window once
(:mod:`~ragpulse.collector.stored.backfill`); ``ragpulse serve --source phoenix``
follows new ones (:mod:`~ragpulse.collector.stored.follow`). One module per tool, a
registered source (``ragpulse.sources``), maps its API and span shape to ragpulse spans
and says how results go back to it (:mod:`.phoenix`, :mod:`.mlflow`, :mod:`.langfuse`);
:mod:`.common` holds what their readers share, :mod:`.tool` finds the tool a URL names.
From there on a stored trace takes the live path: assembly, extraction, sampling,
evaluation and every sink, the tool's own among them, so results land next to the traces
they judge. (Kept free of imports: the source registry finds its modules without loading
them.)
"""
