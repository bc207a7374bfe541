"""Assembly: spans grouped by trace id into traces, and when a trace is done.

A trace is complete when its root span ended and a grace window passed. Memory is
bounded (open traces, spans per trace, held bytes); what a bound refuses is counted by
reason, and each trace carries the acknowledgements of the batches it came in, released
only when its records are exported.
"""
