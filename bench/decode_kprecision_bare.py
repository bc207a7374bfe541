"""The bare floor for `ragpulse serve`: decode OTLP/HTTP protobuf bodies and compute
K-Precision per trace, nothing else (no HTTP, no models, no validation, no sinks).

Reads a file of length-prefixed ExportTraceServiceRequest bodies (4-byte big-endian
length, then the body), as `cheap_tier_ratio.py` writes it; prints one JSON line:
{"traces": N, "seconds": S, "cpu_seconds": C} for the decode + scoring loop alone (start-up and the file
read are not timed, as the collector's start-up is not in its figure either).

    python bench/decode_kprecision_bare.py BODIES.bin
"""

import json
import re
import sys
import time

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

TOKEN = re.compile(r"\w+")
STOP = frozenset(
    "a an the of to in and or is are was were be it that this for on with as by at".split()
)
CONTENT = "retrieval.documents."


def tokens(text: str) -> list[str]:
    return [t for t in TOKEN.findall(text.lower()) if t not in STOP]


def read_bodies(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    bodies, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        bodies.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return bodies


def score(bodies: list[bytes]) -> int:
    """Decode every body, group spans by trace, K-Precision of each trace's answer."""
    traces = 0
    for body in bodies:
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        answers: dict[bytes, str] = {}
        documents: dict[bytes, list[str]] = {}
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    for kv in span.attributes:
                        key = kv.key
                        if key == "output.value" and span.name == "pipeline":
                            answers[span.trace_id] = kv.value.string_value
                        elif key.startswith(CONTENT) and key.endswith(".content"):
                            documents.setdefault(span.trace_id, []).append(kv.value.string_value)
        for trace_id, answer in answers.items():
            words = tokens(answer)
            vocabulary: set[str] = set()
            for document in documents.get(trace_id, ()):
                vocabulary.update(tokens(document))
            _ = sum(t in vocabulary for t in words) / len(words) if words else None
            traces += 1
    return traces


def main() -> None:
    bodies = read_bodies(sys.argv[1])
    start, cpu = time.perf_counter(), time.process_time()
    traces = score(bodies)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"traces": traces, "seconds": seconds, "cpu_seconds": cpu}))


if __name__ == "__main__":
    main()
