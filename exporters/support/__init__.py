"""What the sinks share: delivery to a tool's HTTP API with a bounded queue and retries
(:mod:`.delivery`), which span a result judges (:mod:`.targets`), how results are
redacted and described (:mod:`.results`), and the Prometheus score series."""
