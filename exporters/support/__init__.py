"""What the sinks share: delivery with a bounded queue, batches and retries
(:mod:`.delivery`) composed with a tool's HTTP API (:mod:`.http_api`) by the tracing-tool
sinks' base (:mod:`.tool_sink`), which span a result judges (:mod:`.targets`), how
results are redacted and described (:mod:`.results`), and the Prometheus score series."""
