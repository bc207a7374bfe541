"""Extraction: a completed trace becomes records.

:mod:`.conventions` is the one table of which attributes say what (OpenInference, OTel
GenAI, OpenLLMetry, ragpulse's own), built from the attribute readers of :mod:`.readers`;
:mod:`.spans` reads a trace's span tree, :mod:`.messages` a model call's chat messages in
one shape, :mod:`.agent_turns` an agent's tool calls and results, :mod:`.history` a turn's
place in its conversation, and :mod:`.records` puts them together into
:class:`~ragpulse.record.RagRecord`. Unknown shapes are counted, never fatal.
"""
