"""Sinks: Prometheus, OTel evaluation signals, JSONL files."""
