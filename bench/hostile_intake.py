"""Hostile OTLP/HTTP intake: status codes and receiver RSS under a stream of bad bodies.

Starts ``ragpulse serve`` (a subprocess, so its RSS is the receiver's alone) on
127.0.0.1 with free ports, warms it up, then sends ``--bodies`` hostile bodies of
every kind below over one keep-alive connection (reconnecting, and counting the
drop, when the server closes it), with a valid RAG trace every ``--valid-every``
bodies. Prints the RSS before, during and after, and the status-code histogram
per kind.

Kinds: mutated valid protobuf ``ExportTraceServiceRequest`` (bit flips,
insertions, deletions, splices), random bytes (as protobuf and as JSON), deep
JSON (5,000 levels, bare and inside an attribute value), deep protobuf
``AnyValue`` nesting (array and kvlist, 5,000 levels), a gzip bomb (1 GB of
zeros, ~1 MB compressed, ``Content-Encoding: gzip``), wrong JSON types (strings
where ints go, objects where lists go), wrong media types, truncated bodies
(protobuf, JSON, gzip) and bodies over the size limit.

By default serve runs without the model tier (``--evaluators`` to change it):
its models (torch, MiniLM: ~400 MiB) load in a background thread after start
and, counted during the stream, looked like the receiver growing by ~250 MiB.
With them loaded before "before" (``--evaluators ''``, RSS is let settle first)
the stream is flat too, but for model-tier batches of the valid traces.

``--tracemalloc`` runs the collector in this process instead, under
tracemalloc, and prints the allocation sites that grew the most (the client's
own allocations are filtered out by file).

    .venv/bin/python bench/hostile_intake.py [--bodies 1500] [--seed 7] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import random
import socket
import subprocess
import sys
import time
import urllib.request
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.helpers import rag_request

PROTOBUF, JSON = "application/x-protobuf", "application/json"
Body = tuple[str, bytes, str | None, dict[str, str]]
"""(kind, body, Content-Type or None for no header, extra headers)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def valid_request(rng: random.Random) -> trace_service_pb2.ExportTraceServiceRequest:
    """One pipeline -> retriever + LLM trace, shaped like ragpulse's decorators write."""
    answer = "Paris is the capital of France."
    trace = (rng.randbytes(16), "What is the capital of France?", [answer], answer)
    return rag_request([trace], service="hostile-bench")


def valid_json(rng: random.Random) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": rng.randbytes(16).hex(),
                                "spanId": rng.randbytes(8).hex(),
                                "name": "json-span",
                                "kind": 1,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [{"key": "n", "value": {"intValue": "3"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def deep_protobuf(depth: int, kvlist: bool) -> bytes:
    """A request whose one span has an attribute nested ``depth`` AnyValues deep.

    Written by hand: the protobuf runtime refuses to build or serialise it."""
    value = common_pb2.AnyValue(string_value="leaf").SerializeToString()
    for _ in range(depth):
        if kvlist:  # AnyValue.kvlist_value(6) -> KeyValueList.values(1) -> KeyValue.value(2)
            value = _field(6, _field(1, _field(1, b"k") + _field(2, value)))
        else:  # AnyValue.array_value(5) -> ArrayValue.values(1)
            value = _field(5, _field(1, value))
    span = valid_request(random.Random(depth)).resource_spans[0].scope_spans[0].spans[0]
    span_bytes = span.SerializeToString() + _field(9, _field(1, b"deep") + _field(2, value))
    # ExportTraceServiceRequest.resource_spans(1) -> ResourceSpans.scope_spans(2) -> .spans(2)
    return _field(1, _field(2, _field(2, span_bytes)))


def gzip_bomb(zeros: int = 1 << 30) -> bytes:
    """``zeros`` zero bytes, gzip-compressed in 1 MiB steps (never all in memory)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 20)
    parts = [comp.compress(chunk) for _ in range(zeros // len(chunk))]
    parts.append(comp.flush())
    return b"".join(parts)


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randrange(len(buf)) if buf else 0
        if op < 0.5 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif op < 0.7:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op < 0.85 and buf:
            del buf[pos : pos + rng.randint(1, 16)]
        else:  # splice a copy of a slice elsewhere (length prefixes now lie)
            start = rng.randrange(len(buf)) if buf else 0
            buf[pos:pos] = buf[start : start + rng.randint(1, 64)]
    return bytes(buf)


WRONG_TYPES: list[Callable[[dict[str, Any]], None]] = [
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        startTimeUnixNano="yesterday"
    ),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(kind="sideways"),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(kind=[1, 2]),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(traceId=12345),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(spanId={"a": 1}),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(attributes="x"),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        attributes=[{"key": 5, "value": {"intValue": "NaN"}}]
    ),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        attributes=[{"key": "k", "value": {"doubleValue": {"x": []}}}]
    ),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0].update(spans="not a list"),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0].update(spans=[1, "two", None]),
    lambda p: p["resourceSpans"][0].update(scopeSpans={"spans": []}),
    lambda p: p["resourceSpans"][0].update(scopeSpans=[None, 3]),
    lambda p: p.update(resourceSpans=5),
    lambda p: p.update(resourceSpans=[None]),
    lambda p: p.update(resourceSpans=[[]]),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        startTimeUnixNano="9" * 5000
    ),
    lambda p: p["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        status={"code": "STATUS_CODE_WHATEVER"}
    ),
]


class Bodies:
    """Deterministic hostile bodies; ``valid()`` is a fresh, well-formed RAG trace."""

    def __init__(self, seed: int, max_body: int, bomb_zeros: int = 1 << 30) -> None:
        self.rng = random.Random(seed)
        self.max_body = max_body
        self.template = valid_request(random.Random(seed)).SerializeToString()
        self.bomb = gzip_bomb(bomb_zeros)
        self.deep = {
            (kvlist, depth): deep_protobuf(depth, kvlist)
            for kvlist in (False, True)
            for depth in (150, 5000)
        }
        self.kinds: dict[str, Callable[[], Body]] = {
            "mutated_protobuf": self.mutated_protobuf,
            "random_bytes": self.random_bytes,
            "deep_json": self.deep_json,
            "deep_protobuf": self.deep_protobuf,
            "gzip_bomb": self.gzip_bomb,
            "wrong_types": self.wrong_types,
            "wrong_media_type": self.wrong_media_type,
            "truncated": self.truncated,
            "too_large": self.too_large,
        }
        self.chosen = list(self.kinds.values())

    def valid(self) -> Body:
        return "valid", valid_request(self.rng).SerializeToString(), PROTOBUF, {}

    def valid_json(self) -> Body:
        return "valid", json.dumps(valid_json(self.rng)).encode(), JSON, {}

    def next(self) -> Body:
        return self.rng.choice(self.chosen)()

    def only(self, kinds: list[str]) -> None:
        """Send only these kinds (diagnosis: which kind grows the RSS)."""
        self.chosen = [self.kinds[k] for k in kinds]

    def mutated_protobuf(self) -> Body:
        return "mutated_protobuf", mutate(self.template, self.rng), PROTOBUF, {}

    def random_bytes(self) -> Body:
        body = self.rng.randbytes(self.rng.choice((1, 7, 100, 4096, 65536)))
        return "random_bytes", body, self.rng.choice((PROTOBUF, JSON)), {}

    def deep_json(self) -> Body:
        n = 5000
        shape = self.rng.randrange(4)
        if shape == 0:
            text = "[" * n + "]" * n
        elif shape == 1:
            text = '{"a":' * n + "1" + "}" * n
        elif shape == 2:  # deep inside an attribute value
            payload = valid_json(self.rng)
            attr = '{"arrayValue":{"values":[' * n + '{"intValue":"1"}' + "]}}" * n
            text = json.dumps(payload).replace('{"intValue": "3"}', attr)
        else:  # unbalanced: opens only
            text = "[" * n
        return "deep_json", text.encode(), JSON, {}

    def deep_protobuf(self) -> Body:
        key = (self.rng.random() < 0.5, self.rng.choice((150, 5000)))
        return "deep_protobuf", self.deep[key], PROTOBUF, {}

    def gzip_bomb(self) -> Body:
        return (
            "gzip_bomb",
            self.bomb,
            self.rng.choice((PROTOBUF, JSON)),
            {"Content-Encoding": "gzip"},
        )

    def wrong_types(self) -> Body:
        payload = valid_json(self.rng)
        self.rng.choice(WRONG_TYPES)(payload)
        return "wrong_types", json.dumps(payload).encode(), JSON, {}

    def wrong_media_type(self) -> Body:
        ctype = self.rng.choice(
            ("text/plain", "application/xml", None, "multipart/form-data; boundary=x",
             "application/grpc", "application/x-protobuf-but-not", "*/*")
        )  # fmt: skip
        return "wrong_media_type", self.template, ctype, {}

    def truncated(self) -> Body:
        which = self.rng.randrange(3)
        if which == 0:
            body = self.template[: self.rng.randrange(1, len(self.template))]
            return "truncated", body, PROTOBUF, {}
        if which == 1:
            text = json.dumps(valid_json(self.rng)).encode()
            return "truncated", text[: self.rng.randrange(1, len(text))], JSON, {}
        gz = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        packed = gz.compress(self.template) + gz.flush()
        body = packed[: self.rng.randrange(1, len(packed))]
        return "truncated", body, PROTOBUF, {"Content-Encoding": "gzip"}

    def too_large(self) -> Body:
        return "too_large", bytes(self.max_body + 1), PROTOBUF, {}


class Client:
    """One keep-alive connection; a closed or reset connection is counted and reopened."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.dropped = 0

    def post(self, body: bytes, ctype: str | None, headers: dict[str, str]) -> int:
        h = dict(headers)
        if ctype is not None:
            h["Content-Type"] = ctype
        try:
            self.conn.request("POST", "/v1/traces", body=body, headers=h)
            resp = self.conn.getresponse()
            resp.read()
            if resp.will_close:
                self.conn.close()
            return resp.status
        except (ConnectionError, http.client.HTTPException, OSError):
            self.dropped += 1
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            return 0


def run_stream(
    client: Client, bodies: Bodies, n: int, valid_every: int, rss: Callable[[], float]
) -> tuple[dict[str, Counter[int]], list[tuple[int, float]]]:
    hist: dict[str, Counter[int]] = defaultdict(Counter)
    trend = [(0, rss())]
    for i in range(1, n + 1):
        kind, body, ctype, headers = bodies.next()
        hist[kind][client.post(body, ctype, headers)] += 1
        if i % valid_every == 0:
            kind, body, ctype, headers = bodies.valid()
            hist[kind][client.post(body, ctype, headers)] += 1
        if i % max(1, n // 6) == 0 or i == n:
            trend.append((i, rss()))
    return hist, trend


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def report(hist: dict[str, Counter[int]], trend: list[tuple[int, float]], dropped: int) -> None:
    print("\nRSS of the receiver process:")
    for n, (i, value) in enumerate(trend):
        settled = " (settled)" if n and i == trend[n - 1][0] else ""
        print(f"  after {i:>5} bodies: {mib(value)}{settled}")
    print(f"  growth over the stream: {mib(trend[-1][1] - trend[0][1])}")
    print("\nstatus codes (0 = connection dropped):")
    total: Counter[int] = Counter()
    for kind in sorted(hist):
        total.update(hist[kind])
        codes = ", ".join(f"{code}: {count}" for code, count in sorted(hist[kind].items()))
        print(f"  {kind:<18} {codes}")
    print(f"  {'total':<18} " + ", ".join(f"{c}: {n}" for c, n in sorted(total.items())))
    fivexx = sum(n for c, n in total.items() if c >= 500)
    print(f"\n5xx answers: {fivexx}   dropped connections: {dropped}")


def evaluated(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    for line in text.decode().splitlines():
        if line.startswith("ragpulse_records_evaluated_total "):
            return float(line.split()[1])
    return 0.0


def settle(rss: Callable[[], float], quiet_s: float = 5.0, limit_s: float = 180.0) -> float:
    """Wait until RSS holds still (within 1 MiB) for ``quiet_s``: background loads are done."""
    deadline = time.monotonic() + limit_s
    last, since = rss(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss()
        if abs(now - last) > (1 << 20):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return rss()


def serve(args: argparse.Namespace) -> Iterator[tuple[int, int, Callable[[], float]]]:
    port, metrics = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "ERROR", "serve",
         "--otlp-http-port", str(port), "--metrics-port", str(metrics),
         "--max-body-bytes", str(args.max_body_bytes),
         *(["--evaluators", args.evaluators] if args.evaluators else [])],
        stderr=None if args.verbose else subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "ragpulse serve exited"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        ps = psutil.Process(proc.pid)
        yield port, metrics, lambda: float(ps.memory_info().rss)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bodies", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--valid-every", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=100, help="hostile bodies before 'before'")
    parser.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument(
        "--evaluators",
        default="faithfulness/lexical,context_relevance/lexical,injection/rules",
        help="serve's --evaluators; the default leaves out the model tier, whose models load "
        "in the background and would be counted as the receiver's growth ('' = all)",
    )
    parser.add_argument("--tracemalloc", action="store_true", help="in-process, with tracemalloc")
    parser.add_argument("--kinds", help="comma-separated subset of the kinds (default all)")
    parser.add_argument("--verbose", action="store_true", help="show the server's stderr")
    args = parser.parse_args()

    print("building bodies (the 1 GB gzip bomb takes a few seconds) ...", flush=True)
    bodies = Bodies(args.seed, args.max_body_bytes)
    print(f"gzip bomb: {len(bodies.bomb):,} bytes compressed for 1 GiB of zeros", flush=True)
    if args.kinds:
        bodies.only(args.kinds.split(","))
    if args.tracemalloc:
        in_process(args, bodies)
        return
    for port, metrics, rss in serve(args):
        client = Client(port)
        start = rss()
        # Valid traces first, evaluated, so that the evaluators' models are loaded
        # before "before" (their memory is not the receiver's).
        for _ in range(5):
            assert client.post(*bodies.valid()[1:]) == 200
        deadline = time.monotonic() + 300
        while evaluated(metrics) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        loaded = settle(rss)
        run_stream(client, bodies, args.warmup, args.valid_every, rss)
        print(
            f"RSS at start {mib(start)}, after 5 valid traces evaluated {mib(loaded)}, "
            f"after {args.warmup} warm-up bodies {mib(rss())}"
        )
        hist, trend = run_stream(client, bodies, args.bodies, args.valid_every, rss)
        trend.append((args.bodies, settle(rss)))  # once the last requests' garbage is gone
        report(hist, trend, client.dropped)


def in_process(args: argparse.Namespace, bodies: Bodies) -> None:
    import tracemalloc

    from ragpulse.collector.service import Collector
    from ragpulse.config import load_settings

    settings = load_settings(otlp_http_port=0, max_body_bytes=args.max_body_bytes)
    me = psutil.Process()
    with Collector(settings, metrics_server=False) as collector:
        assert collector.otlp_url is not None
        client = Client(int(collector.otlp_url.rsplit(":", 1)[1]))
        run_stream(client, bodies, args.warmup, args.valid_every, lambda: 0.0)
        gc.collect()
        tracemalloc.start(25)
        before = tracemalloc.take_snapshot()
        hist, trend = run_stream(
            client, bodies, args.bodies, args.valid_every, lambda: float(me.memory_info().rss)
        )
        gc.collect()
        after = tracemalloc.take_snapshot()
        report(hist, trend, client.dropped)
        traced, peak = tracemalloc.get_traced_memory()
        print(f"\ntracemalloc: {mib(traced)} traced now, peak {mib(peak)}")
        skip = tracemalloc.Filter(False, __file__)
        stats = after.filter_traces([skip]).compare_to(before.filter_traces([skip]), "traceback")
        for stat in stats[:8]:
            print(f"\n{mib(stat.size_diff)} in {stat.count_diff:+} blocks")
            for line in stat.traceback.format(limit=6):
                print("   ", line)


if __name__ == "__main__":
    main()
