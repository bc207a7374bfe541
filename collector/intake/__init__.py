"""Intake: spans arrive and are decoded.

The ``otlp_http`` source (:mod:`.otlp_source`, the embedded default) runs the OTLP/HTTP
receiver (:mod:`.otlp_http`) and the OTLP/gRPC one (:mod:`.otlp_grpc`), which answer
"retry later" near the collector's bounds instead of growing memory; the ``kafka``
source (:mod:`.kafka`) is a consumer-group member that commits an offset only once
everything it carried was exported, and carries conversations' turns between replicas;
the re-key stage (:mod:`.rekey`) groups unkeyed batches by trace. :mod:`.otlp` decodes:
nothing past it sees protobuf.
"""
