"""bench/model_tier.py --serve-vs-bare: the model tier through ``ragpulse serve`` against a
bare loop over the same model, inputs and device, in one run (see model_tier.py's
docstring, section 4).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from cheap_tier import cpu_seconds, free_port, peak_rss_mib, post_until_taken, scrape_all
from cheap_tier_ratio import bodies_with_ids
from detector_shapes import FAMILIES, Family, Trace, trace_set

ROOT = Path(__file__).resolve().parents[1]
PER_BODY = 10  # traces per OTLP/HTTP body


def bodies_of(traces: list[Trace], per_body: int) -> list[tuple[bytes, list[str]]]:
    """OTLP/HTTP protobuf bodies (CHAIN, RETRIEVER with the documents, LLM), with the trace
    ids (hex) each carries."""
    return bodies_with_ids([(t.question, t.answer, list(t.documents)) for t in traces], per_body)


class Results:
    """Follows serve's JSONL file: when each trace's detector result (or skip) was seen."""

    def __init__(self, path: Path, family: Family) -> None:
        self._path, self._family = path, family
        self.scored: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._path.exists() and not self._stop.is_set():
            time.sleep(0.02)
        with self._path.open(encoding="utf-8") as f:
            buffer = ""
            while not self._stop.is_set():
                chunk = f.read()
                if not chunk:
                    time.sleep(0.01)
                    continue
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    self._line(json.loads(line), now)

    def _line(self, row: dict[str, Any], now: float) -> None:
        trace_id = row["trace_id"]
        for result in row.get("results", []):
            if (result["metric"], result["method"]) == (self._family.metric, self._family.method):
                self.scored.setdefault(trace_id, now)
        why = row.get("attributes", {}).get("ragpulse.sampled.model", "")
        if why.startswith("skipped:"):
            self.skipped[trace_id] = why.removeprefix("skipped:")

    def wait(self, ids: list[str], timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if all(i in self.scored or i in self.skipped for i in ids):
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Serve:
    """One pinned ``ragpulse serve`` with one detector family."""

    def __init__(self, args: argparse.Namespace, family: Family, model: Path, tmp: Path,
                 deadline: bool = False) -> None:  # fmt: skip
        self.family = family
        self.jsonl = tmp / f"results-{secrets.token_hex(4)}.jsonl"
        model_tier: dict[str, Any] = {"rate": 1, "budget": 1, "device": args.device,
                                      "dtype": args.dtype}  # fmt: skip
        if not deadline:  # throughput: nothing expires, nothing is refused
            model_tier |= {"max_delay_s": 3600, "max_queue": 100_000}
        config = {
            "evaluation": {
                "evaluators": [family.evaluator],
                "max_export_delay_s": 0,
                "max_backlog": 100_000,
                "model": model_tier,
                "options": {family.evaluator: {"model": str(model), **family.options}},
            },
            "assembly": {"grace_s": 0.05, "tick_s": 0.02, "max_open_traces": 100_000},
            "sinks": {"jsonl": {"path": str(self.jsonl)}},
        }
        path = tmp / f"serve-{secrets.token_hex(4)}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.port, metrics = free_port(), free_port()
        self.url = f"http://127.0.0.1:{metrics}/metrics"
        cmd = ["taskset", "-c", args.core, sys.executable, "-m", "ragpulse.cli", "--log-level",
               "WARNING", "serve", "--config", str(path), "--otlp-http-port", str(self.port),
               "--otlp-grpc-port", "0", "--metrics-port", str(metrics)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.results = Results(self.jsonl, family)
        self.placement = self._wait_loaded()

    def _wait_loaded(self) -> str:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("ragpulse serve exited at start")
            try:
                for name, labels, value in scrape_all(self.url):
                    if name == "ragpulse_model_device_info" and value == 1:
                        return f"{labels['device']}, {labels['dtype']}"
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("the detector did not load within 600 s")

    def post(self, bodies: list[tuple[bytes, list[str]]], clients: int = 2) -> dict[str, float]:
        """POST every body (retrying 503s); when each trace was sent."""
        sent: dict[str, float] = {}

        def send(chunk: list[tuple[bytes, list[str]]]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            for body, ids in chunk:
                taken_at, _ = post_until_taken(conn, body)[-1]
                sent.update(dict.fromkeys(ids, taken_at))
            conn.close()

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(send, [bodies[i::clients] for i in range(clients)]))
        return sent

    def stop(self) -> float:
        rss = peak_rss_mib(self.proc.pid)
        self.proc.terminate()
        self.proc.wait(120)
        self.results.close()
        return rss


def serve_once(args: argparse.Namespace, family: Family, model: Path, tmp: Path,
               traces: list[Trace]) -> dict[str, Any]:  # fmt: skip
    """Throughput (all traces posted at once) and latency (paced at half of it)."""
    serve = Serve(args, family, model, tmp)
    try:
        cpu0 = cpu_seconds(serve.proc.pid)
        load = os.getloadavg()[0]
        bodies = bodies_of(traces, PER_BODY)
        sent = serve.post(bodies)
        ids = [i for _, chunk in bodies for i in chunk]
        if not serve.results.wait(ids, 3600):
            raise SystemExit("serve did not score every trace within an hour")
        seen = [serve.results.scored[i] for i in ids if i in serve.results.scored]
        # From the first POST to the last score: start-up (assembly's grace, the first
        # batch's fill) counts against serve; it is a fraction of a second.
        rate = len(seen) / (max(seen) - min(sent.values())) if seen else float("nan")
        cpu = cpu_seconds(serve.proc.pid) - cpu0
        gaps = 2.0 / rate  # half the throughput
        paced = trace_set(len(traces) + 12)[len(traces) :]
        latencies = []
        for body in bodies_of(paced, 1):
            sent = serve.post([body], clients=1)
            (trace_id,) = body[1]
            serve.results.wait([trace_id], 600)
            if trace_id in serve.results.scored:
                latencies.append((serve.results.scored[trace_id] - sent[trace_id]) * 1000)
            time.sleep(max(0.0, gaps - latencies[-1] / 1000 if latencies else gaps))
        skipped = Counter(serve.results.skipped.values())
        return {"traces/s": rate, "traces/CPU-s": len(seen) / cpu, "latencies_ms": latencies,
                "load": load, "skipped": dict(skipped), "placement": serve.placement}  # fmt: skip
    finally:
        rss = serve.stop()
        serve_rss[family.key] = max(serve_rss.get(family.key, 0.0), rss)


serve_rss: dict[str, float] = {}  # peak RSS of serve, by family, over its runs


def bare_once(args: argparse.Namespace, family: Family, model: Path, traces: int,
              placement: str) -> dict[str, Any]:  # fmt: skip
    device, _, dtype = placement.partition(", ")
    cmd = ["taskset", "-c", args.core, sys.executable, str(ROOT / "bench" / "detector_bare.py"),
           str(model), family.key, str(traces), "--device", device, "--dtype",
           dtype if dtype in ("fp32", "bf16", "fp16") else "fp32",
           "--max-batch-tokens", str(32768 if device.startswith("cuda") else 4096)]  # fmt: skip
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    figures["traces/s"] = figures["traces"] / figures["seconds"]
    figures["traces/CPU-s"] = figures["traces"] / figures["cpu_seconds"]
    figures["load"] = load
    return figures


class Sampler:
    """nvidia-smi's GPU utilisation sampled every 0.2 s while a side runs (GPU only)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if shutil.which("nvidia-smi"):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True).stdout  # fmt: skip
            try:
                self.samples.append(float(out.split()[0]))
            except (IndexError, ValueError):
                pass
            self._stop.wait(0.2)

    def stop(self) -> str:
        self._stop.set()
        if self._thread is None:
            return "n/a (no GPU)"
        self._thread.join(5)
        return f"{statistics.fmean(self.samples):.0f}%" if self.samples else "no samples"


def burst(args: argparse.Namespace, family: Family, model: Path, tmp: Path, size: int) -> str:
    """A burst of ``size`` traces into serve with its default deadline and queue."""
    serve = Serve(args, family, model, tmp, deadline=True)
    try:
        bodies = bodies_of(trace_set(size, seed=11), PER_BODY)
        serve.post(bodies)
        ids = [i for _, chunk in bodies for i in chunk]
        serve.results.wait(ids, 600)
        scored = sum(i in serve.results.scored for i in ids)
        skipped = Counter(serve.results.skipped[i] for i in ids if i in serve.results.skipped)
        why = ", ".join(f"{n} {reason}" for reason, n in skipped.most_common()) or "none"
        return f"burst of {size}: {scored} scored, skipped: {why}"
    finally:
        serve.stop()


def cpus(spec: str) -> set[int]:
    """The CPUs of a taskset list ("0", "0-3", "0,2")."""
    out: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def serve_vs_bare(args: argparse.Namespace) -> None:
    import torch

    pinned = cpus(args.core)
    # The load generator (this process): the other cores, where there are any.
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)) - pinned or pinned)
    print(
        f"[4] serve vs bare, one core each (taskset -c {args.core}): {args.traces} traces a "
        f"run, {args.rounds} alternated rounds; torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    traces = trace_set(args.traces)
    with tempfile.TemporaryDirectory(prefix="ragpulse-model-tier-") as name:
        tmp = Path(name)
        os.environ.setdefault("RAGPULSE_CACHE_DIR", str(tmp / "cache"))
        for key in args.families.split(","):
            family = FAMILIES[key]
            model = tmp / key
            family.build(model)
            rows = sum(len(family.inputs(t)[0]) for t in traces)
            print(f"\n    {family.label} as {family.evaluator}: {rows / len(traces):.1f} inputs "
                  "a trace", flush=True)  # fmt: skip
            serve_runs, bare_runs = [], []
            for _ in range(args.rounds):
                sampler = Sampler()
                serve_runs.append(serve_once(args, family, model, tmp, traces))
                serve_runs[-1]["device use"] = sampler.stop()
                sampler = Sampler()
                bare_runs.append(bare_once(args, family, model, args.traces,
                                           serve_runs[-1]["placement"]))  # fmt: skip
                bare_runs[-1]["device use"] = sampler.stop()
                s, b = serve_runs[-1], bare_runs[-1]
                print(f"      round: serve {s['traces/s']:.2f} traces/s, {s['traces/CPU-s']:.2f} "
                      f"per CPU-s (load {s['load']:.1f}); bare {b['traces/s']:.2f}, "
                      f"{b['traces/CPU-s']:.2f} (load {b['load']:.1f}): "
                      f"{s['traces/s'] / b['traces/s']:.2f}x wall clock, "
                      f"{s['traces/CPU-s'] / b['traces/CPU-s']:.2f}x per CPU-s", flush=True)  # fmt: skip
            s_rate = statistics.median(r["traces/s"] for r in serve_runs)
            b_rate = statistics.median(r["traces/s"] for r in bare_runs)
            s_lat = [x for r in serve_runs for x in r["latencies_ms"]]
            b_lat = [x for r in bare_runs for x in r["latencies_ms"]]
            print(f"      on {serve_runs[0]['placement']}")
            print(f"      serve: {s_rate:.2f} traces/s, p50 {pct(s_lat, 0.5):,.0f} ms, p99 "
                  f"{pct(s_lat, 0.99):,.0f} ms (post to score, paced at half its throughput), "
                  f"peak RSS {serve_rss.get(key, float('nan')):.0f} MiB, device "
                  f"{serve_runs[-1]['device use']}, skipped "
                  f"{serve_runs[-1]['skipped'] or 'none'}")  # fmt: skip
            device_mib = bare_runs[-1].get("peak_device_mib")
            print(
                f"      bare:  {b_rate:.2f} traces/s, p50 {pct(b_lat, 0.5):,.0f} ms, p99 "
                f"{pct(b_lat, 0.99):,.0f} ms (one trace's rows alone), peak RSS "
                f"{max(r['peak_rss_mib'] for r in bare_runs):.0f} MiB"
                + (f", device {device_mib:.0f} MiB" if device_mib else "")
                + f", device {bare_runs[-1]['device use']}, "
                f"{bare_runs[-1]['padding']:.1%} padding in {bare_runs[-1]['passes']} passes"
            )
            s_cpu = statistics.median(r["traces/CPU-s"] for r in serve_runs)
            b_cpu = statistics.median(r["traces/CPU-s"] for r in bare_runs)
            print(f"      ratio serve / bare: {s_rate / b_rate:.2f}x wall clock (medians), "
                  f"{s_cpu / b_cpu:.2f}x per CPU-second ({s_cpu:.2f} against {b_cpu:.2f} "
                  "traces per CPU-second)", flush=True)  # fmt: skip
            if args.burst:
                allowed = max(1, int(0.6 * s_rate * 10))
                for size in (allowed, 240):
                    print(f"      {burst(args, family, model, tmp, size)}", flush=True)
