"""The cheap tier against its bare floor, side by side in one run, with the profile.

1. `ragpulse serve` (default evaluators) pinned to one core with ``taskset -c 0``, fed
   OTLP/HTTP protobuf bodies of 60 traces each (a CHAIN span, a RETRIEVER span with 5
   documents of ~100 words, an LLM span), timed from the first POST until every trace's
   faithfulness is counted in /metrics; against `decode_kprecision_bare.py` on the same
   core over the same bodies (protobuf decode + K-Precision per trace, nothing else).
   The load generator runs in this process on the other cores. Alternated, ``--rounds``
   times each; medians, the ratio, and serve's peak RSS.
2. `ragpulse eval` with its defaults against `kprecision_bare.py` (regex + set
   K-Precision) over the SummEdits dev file, whole process against whole process (start-up
   included), both pinned to the same core, alternated ``--eval-runs`` times; medians and
   the ratio.
3. Where serve's time goes: two more serve runs sampled by py-spy (``--no-profile`` skips
   them): the share of samples that pass through each part of the collector (inclusive), and
   the functions that take the most samples themselves. The first run samples every thread
   that is not idle, waiting for the GIL included; the second only threads that hold the
   GIL (the collector's own CPU time; Hyperscan scans release the GIL, so the first run
   counts a scan and the wait to take the GIL back after it, the second neither).

The texts come from the SummEdits dev file: each trace's answer is a row's summary, its
question asks about words of that summary, and its 5 documents are 100-word windows of
the row's source document at offsets that differ from trace to trace. The rows come back
every 2,449 traces: of the 84,000 texts of 12,000 traces, 24,078 are distinct, and a text
recurs a median 17,000 texts later, past the 4,096 analyses the collector keeps, so about
a quarter of the lookups find a text analysed already (with an unbounded cache, three
quarters would: in-process, ~256 instead of ~360 us per trace). Serve runs with its
defaults except for assembly: a trace completes 50 ms after its last span (grace_s 0.05,
not 1 s, which would otherwise dominate a run of a few seconds) and the open-trace and
backlog bounds are raised above the run's size so that no POST is refused.

    .venv/bin/python bench/cheap_tier_ratio.py [--rounds 3] [--traces 12000] [--eval-runs 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cheap_tier import cpu_seconds, free_port, peak_rss_mib, post_until_taken, scrape_all
from eval_speed import run as run_process
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

ROOT = Path(__file__).resolve().parents[1]
# $RAGPULSE_DEV_DATA (a directory) first, else the shared checkout's dev split, as the tests.
DEV = Path(os.environ.get("RAGPULSE_DEV_DATA") or ROOT.parent / "shared" / "data" / "dev")
DATA = DEV / "faithfulness_summedits_dev.jsonl"
CORE = "0"  # the collector's (and the bare scripts') one core
SERVE_ENV = {
    "RAGPULSE_ASSEMBLY__GRACE_S": "0.05",
    "RAGPULSE_ASSEMBLY__TICK_S": "0.02",
}


# --- the workload -------------------------------------------------------------------


def traces_from(rows: list[dict], count: int) -> list[tuple[str, str, list[str]]]:
    """(question, answer, 5 documents of 100 words) per trace, deterministic."""
    out = []
    for i in range(count):
        row = rows[i % len(rows)]
        words = " ".join(row["contexts"]).split()
        answer = row["answer"]
        topic = [w.strip(".,;:!?\"'()") for w in answer.split() if len(w) > 4][:4]
        question = f"What does the document say about {' '.join(topic) or 'this'}?"
        documents = []
        for j in range(5):
            start = (i * 7 + j * 100) % len(words)
            window = (words[start:] + words)[:100]
            documents.append(" ".join(window))
        out.append((question, answer, documents))
    return out


def _kv(key: str, value: str | float) -> common_pb2.KeyValue:
    any_value = (
        common_pb2.AnyValue(double_value=value)
        if isinstance(value, float)
        else common_pb2.AnyValue(string_value=value)
    )
    return common_pb2.KeyValue(key=key, value=any_value)


def bodies_with_ids(
    traces: list[tuple[str, str, list[str]]], per_request: int
) -> list[tuple[bytes, list[str]]]:
    """OTLP/HTTP protobuf bodies of ``per_request`` traces (CHAIN, RETRIEVER, LLM spans),
    each with the trace ids (hex) it carries."""
    bodies = []
    now = time.time_ns()
    for at in range(0, len(traces), per_request):
        request = trace_service_pb2.ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.append(_kv("service.name", "bench"))
        scope = rs.scope_spans.add()
        ids = []
        for question, answer, documents in traces[at : at + per_request]:
            trace_id, root = secrets.token_bytes(16), secrets.token_bytes(8)
            ids.append(trace_id.hex())
            retriever = [("openinference.span.kind", "RETRIEVER"), ("input.value", question)]
            for j, doc in enumerate(documents):
                prefix = f"retrieval.documents.{j}.document"
                retriever += [
                    (f"{prefix}.id", f"doc-{j}"),
                    (f"{prefix}.content", doc),
                    (f"{prefix}.score", 1.0 - j / 10),
                ]
            spans = [
                (root, b"", "pipeline", [("openinference.span.kind", "CHAIN"),
                                         ("input.value", question), ("output.value", answer)]),
                (secrets.token_bytes(8), root, "retrieve", retriever),
                (secrets.token_bytes(8), root, "generate", [("openinference.span.kind", "LLM"),
                                                            ("llm.model_name", "bench-model"),
                                                            ("output.value", answer)]),
            ]  # fmt: skip
            for span_id, parent, name, attributes in spans:
                span = scope.spans.add()
                span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent
                span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, now, now + 1
                span.attributes.extend(_kv(k, v) for k, v in attributes)
        bodies.append((request.SerializeToString(), ids))
    return bodies


def build_bodies(traces: list[tuple[str, str, list[str]]], per_request: int) -> list[bytes]:
    """OTLP/HTTP protobuf bodies of ``per_request`` traces: CHAIN, RETRIEVER, LLM spans."""
    return [body for body, _ in bodies_with_ids(traces, per_request)]


# --- one serve run ------------------------------------------------------------------


def faithfulness_counted(url: str) -> float:
    return sum(
        v
        for name, labels, v in scrape_all(url)
        if name == "ragpulse_eval_results_total" and labels.get("metric") == "faithfulness"
    )


def serve_once(
    bodies: list[bytes],
    traces: int,
    clients: int,
    profile: Path | None = None,
    gil_only: bool = False,
) -> dict[str, float]:
    """Traces/s of one pinned ``ragpulse serve`` from the first POST to the last count."""
    otlp_port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        **SERVE_ENV,
        "RAGPULSE_ASSEMBLY__MAX_OPEN_TRACES": str(traces + 1),
        "RAGPULSE_EVALUATION__MAX_BACKLOG": str(traces + 1),
    }
    cmd = ["taskset", "-c", CORE, sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING",
           "serve", "--otlp-http-port", str(otlp_port), "--metrics-port", str(metrics_port)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    sampler = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                scrape_all(url)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("ragpulse serve did not start") from None
                time.sleep(0.1)
        if profile is not None:
            sampler = subprocess.Popen(
                [py_spy(), "record", "--pid", str(proc.pid), "--rate", "200", "--format", "raw",
                 "--nonblocking", *(["--gil"] if gil_only else []), "--output", str(profile)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.0)  # py-spy attaches

        def send(chunk: list[bytes]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", otlp_port, timeout=60)
            for body in chunk:
                post_until_taken(conn, body)
            conn.close()

        start, cpu = time.perf_counter(), cpu_seconds(proc.pid)
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(send, [bodies[i::clients] for i in range(clients)]))
        while (counted := faithfulness_counted(url)) < traces:
            if time.perf_counter() - start > 600:
                raise SystemExit("timed out waiting for the faithfulness counts")
            # A scrape costs the collector a few ms: rarely, until the end is near.
            time.sleep(0.02 if counted >= 0.9 * traces else 0.25)
        elapsed, cpu = time.perf_counter() - start, cpu_seconds(proc.pid) - cpu
        return {
            "traces/s": traces / elapsed,
            "traces/CPU-s": traces / cpu,
            "peak RSS MiB": peak_rss_mib(proc.pid),
        }
    finally:
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
            sampler.wait(60)
        proc.terminate()
        proc.wait(60)


def bare_once(bodies_file: Path) -> dict[str, float]:
    """Traces/s (and per CPU-second) of the bare script on the collector's core."""
    script = ROOT / "bench" / "decode_kprecision_bare.py"
    out = subprocess.run(["taskset", "-c", CORE, sys.executable, str(script), str(bodies_file)],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    figures = json.loads(out)
    return {
        "traces/s": figures["traces"] / figures["seconds"],
        "traces/CPU-s": figures["traces"] / figures["cpu_seconds"],
    }


def py_spy() -> str:
    """py-spy beside this interpreter (the dev extra installs it), else on PATH."""
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"


# --- the profile --------------------------------------------------------------------

# Parts of the collector, by the file a frame is in (py-spy names frames
# "function (path:line)"). A sample belongs to the part of its innermost frame that
# names one (library frames count for the part that called them); the first marker
# that a path contains names the part.
PARTS = (
    ("injection rules (normalise, Hyperscan, payloads)", ("evaluators/injection_engine",)),
    ("refusal rules", ("evaluators/refusal/rules.py",)),
    ("text analysis (tokens, shared)", ("evaluators/text/analyses.py",)),
    ("lexical metrics", ("/lexical.py", "evaluators/text/overlap.py")),
    ("evaluation glue (bounds, results)", ("evaluators/base.py", "ragpulse/evaluation.py")),
    (
        "extraction",
        (
            "collector/extract/records.py",
            "collector/extract/readers.py",
            "collector/extract/conventions.py",
        ),
    ),
    ("OTLP decode", ("collector/intake/otlp.py",)),
    ("HTTP receiver", ("collector/intake/otlp_http.py", "aiohttp/", "asyncio/")),
    ("assembly", ("collector/assembly/assembler.py", "collector/service.py")),
    ("pipeline", ("collector/evaluate/pipeline.py",)),
    ("sinks", ("exporters/",)),
    ("/metrics scrapes", ("prometheus_client/", "socketserver.py", "http/server.py")),
    ("waiting (locks, queues)", ("threading.py", "queue.py", "selectors.py")),
)


def _location(frame: str) -> tuple[str, str]:
    """("function", "path") of a py-spy frame "function (path:line)"."""
    name, _, where = frame.rpartition(" (")
    return name, where.rsplit(":", 1)[0]


def _part(paths: list[str]) -> str:
    for path in reversed(paths):
        for part, markers in PARTS:
            if any(m in path for m in markers):
                return part
    return "other"


def profile_table(raw: Path, top: int) -> list[str]:
    stacks: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    total = sum(stacks.values())
    if not total:
        return ["    (no samples)"]
    parts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        parts[_part([_location(f)[1] for f in frames if " (" in f])] += count
        leaf_name, leaf_path = _location(frames[-1])
        own[f"{leaf_name} ({leaf_path.split('site-packages/')[-1]})"] += count
    lines = [f"    {total} samples of the collector's threads (200 Hz)",
             "    by part (the innermost part a sample is in):"]  # fmt: skip
    lines += [f"      {100 * n / total:5.1f}%  {part}" for part, n in parts.most_common()]
    lines.append(f"    top {top} functions by their own samples:")
    lines += [f"      {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    return lines


# --- main ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--traces", type=int, default=12_000)
    parser.add_argument("--traces-per-request", type=int, default=60)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="serve and bare runs, each")
    parser.add_argument(
        "--eval-runs", type=int, default=5, help="eval and bare runs, each (0: skip)"
    )
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"data set not found: {args.data} (see ../shared/data/dev)")
    # Children keep the bytecode they compile, as an installed package's modules do (an
    # environment that forbids it would charge every `ragpulse eval` run for compiling).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    cores = os.cpu_count() or 1
    os.sched_setaffinity(0, set(range(1, cores)) or {0})  # the load generator: other cores
    load = os.getloadavg()
    print(f"cheap tier vs its bare floor; {cores} CPUs, load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}, Python {sys.version.split()[0]}")  # fmt: skip

    rows = [json.loads(line) for line in args.data.open(encoding="utf-8") if line.strip()]
    workload = traces_from(rows, args.traces)
    bodies = build_bodies(workload, args.traces_per_request)
    distinct = len({d for _, _, docs in workload for d in docs})
    tmp = Path(tempfile.mkdtemp(prefix="ragpulse-ratio-"))
    try:
        bodies_file = tmp / "bodies.bin"
        with bodies_file.open("wb") as f:
            for body in bodies:
                f.write(len(body).to_bytes(4, "big") + body)
        serve: list[dict[str, float]] = []
        bare: list[dict[str, float]] = []
        for _ in range(args.rounds):
            serve.append(serve_once(bodies, args.traces, args.clients))
            bare.append(bare_once(bodies_file))
        print(f"\n[1] serve on one core vs bare decode + K-Precision on one core: {args.traces} "
              f"traces in {len(bodies)} bodies, {distinct} distinct documents, "
              f"{args.rounds} alternated rounds")  # fmt: skip
        for unit, what in (("traces/s", "wall clock"), ("traces/CPU-s", "per CPU-second")):
            s_rate = statistics.median(s[unit] for s in serve)
            b_rate = statistics.median(b[unit] for b in bare)
            print(f"    {what}: serve {s_rate:,.0f} {unit}, bare {b_rate:,.0f}: "
                  f"ratio {s_rate / b_rate:.2f}x  (serve runs: "
                  + ", ".join(f"{s[unit]:,.0f}" for s in serve) + "; bare runs: "
                  + ", ".join(f"{b[unit]:,.0f}" for b in bare) + ")")  # fmt: skip
        print(f"    serve peak RSS {max(s['peak RSS MiB'] for s in serve):.0f} MiB")

        rows_n = len(rows)
        ragpulse = shutil.which("ragpulse", path=str(Path(sys.executable).parent)) or "ragpulse"
        pin = ["taskset", "-c", CORE]
        commands = {
            "bare regex + set K-Precision": [*pin, sys.executable,
                                             str(ROOT / "bench" / "kprecision_bare.py"),
                                             str(args.data), str(tmp / "bare.jsonl")],
            "ragpulse eval (defaults)": [*pin, ragpulse, "eval", str(args.data), "-o",
                                         str(tmp / "eval.jsonl")],
        }  # fmt: skip
        walls: dict[str, list[float]] = {name: [] for name in commands}
        rss: dict[str, float] = dict.fromkeys(commands, 0.0)
        if args.eval_runs:
            run_process(commands["ragpulse eval (defaults)"])  # warm the file and disk caches
        for _ in range(args.eval_runs):
            for name, cmd in commands.items():
                wall, peak = run_process(cmd)
                walls[name].append(wall)
                rss[name] = max(rss[name], peak)
        if args.eval_runs:
            print(f"\n[2] whole process over {args.data.name} ({rows_n} rows), both on one core, "
                  f"{args.eval_runs} alternated runs")  # fmt: skip
            medians = {name: statistics.median(v) for name, v in walls.items()}
            for name, median in medians.items():
                print(f"    {name:32} {median:6.2f} s  {rows_n / median:8,.0f} rows/s  "
                      f"peak RSS {rss[name]:5.0f} MiB  (runs: "
                      + ", ".join(f"{w:.2f}" for w in walls[name]) + ")")  # fmt: skip
            bare_s = medians["bare regex + set K-Precision"]
            print(
                f"    ratio eval / bare (speed): {bare_s / medians['ragpulse eval (defaults)']:.2f}x"
            )

        if not args.no_profile:
            print("\n[3] where serve's time goes (two more runs, sampled by py-spy)")
            if not shutil.which(py_spy()):
                print("    py-spy not found on PATH (pip install py-spy): skipped")
            else:
                for gil_only, what in (
                    (False, "threads that are not idle (GIL waits included)"),
                    (True, "threads holding the GIL (the collector's CPU)"),
                ):
                    raw = tmp / f"profile-{gil_only}.txt"
                    figures = serve_once(bodies, args.traces, args.clients, raw, gil_only)
                    print(
                        f"\n  {what}; this run, slowed by the sampler: "
                        f"{figures['traces/s']:,.0f} traces/s"
                    )
                    print("\n".join(profile_table(raw, args.top) if raw.is_file()
                                    else ["    py-spy wrote no samples"]))  # fmt: skip
        load = os.getloadavg()
        print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
