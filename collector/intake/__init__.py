"""Intake: spans arrive and are decoded.

The OTLP/HTTP receiver (:mod:`.otlp_http`, the embedded default) and the OTLP/gRPC one
(:mod:`.otlp_grpc`) answer "retry later" near the collector's bounds instead of growing
memory; the Kafka span source (:mod:`.kafka`) is a consumer-group member that commits an
offset only once everything it carried was exported (:mod:`.offsets`), and the re-key
stage (:mod:`.rekey`) groups unkeyed batches by trace. :mod:`.otlp` decodes: nothing past
it sees protobuf.
"""
