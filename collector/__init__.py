"""The collector: the walk of a trace, one room per step.

:mod:`~ragpulse.collector.intake` receives and decodes spans (OTLP over HTTP and gRPC,
Kafka); :mod:`~ragpulse.collector.assembly` groups them into traces and decides when a
trace is complete; :mod:`~ragpulse.collector.extract` turns a trace into records (the
conventions, the chat messages, agent turns); :mod:`~ragpulse.collector.evaluate` samples
and scores them tier by tier and hands them to the sinks; :mod:`~ragpulse.collector.
conversations` joins the turns of a chat and closes them into conversation records; and
:mod:`~ragpulse.collector.stored` reads traces that a tracing tool already stores.
The sources of both are plug-ins (:mod:`ragpulse.source`). :mod:`~ragpulse.collector.
service` builds the rooms once and hands every thread they run to one
:mod:`~ragpulse.collector.lifecycle`, which starts them in order and stops them in
reverse. A room imports only the rooms below it (the import-linter contract in
pyproject.toml); what several rooms share (the lifecycle, the Kafka plumbing of
:mod:`~ragpulse.collector.kafka_group`) sits outside them, below them all.
"""
