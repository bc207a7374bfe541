"""Collector settings: defaults < config file (YAML or TOML) < ``RAGPULSE_*`` env < flags.

Resolved once into a frozen, validated object. Every top-level field is also an
environment variable named ``RAGPULSE_<FIELD>`` (``RAGPULSE_METRICS_PORT``);
nested ones use ``__`` (``RAGPULSE_ASSEMBLY__GRACE_S``), and the nested settings
that have a CLI flag also answer to the flag's name (``RAGPULSE_JUDGE_BASE_URL``);
an unknown ``RAGPULSE_*`` variable is an error (ragpulse/settings_env.py). The
config file is named by ``--config`` or ``RAGPULSE_CONFIG``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ragpulse.errors import ConfigError
from ragpulse.options import PluginOptions
from ragpulse.settings_env import environment_problems, reads_settings

CONFIG_ENV = "RAGPULSE_CONFIG"


class _Section(PluginOptions):
    """A settings section: immutable, unknown keys refused."""


class AssemblySettings(_Section):
    """When a trace is complete. With its root span: ``grace_s`` after its last span. Without
    it (an agent still working, or an app that died mid-turn): ``idle_s`` after its last
    span, or ``max_trace_s`` after its first, whichever comes first; its records are then
    marked partial. A span that arrives after its trace closed rebuilds the trace's records
    as a revision while the closed trace is kept (``keep_closed_s``)."""

    grace_s: float = Field(1.0, gt=0, description="Quiet period after the root span arrives.")
    idle_s: float = Field(
        300.0,
        gt=0,
        description="Quiet time since the last span of a trace whose root has not arrived; "
        "then it closes as partial. Longer than an agent's longest step (a slow tool, a "
        "long model call).",
    )
    max_trace_s: float = Field(
        1800.0,
        gt=0,
        description="Longest a trace stays open from its first span, spans coming or not; "
        "then it closes (as partial without its root), and later spans revise it.",
    )
    keep_closed_s: float = Field(
        600.0,
        ge=0,
        description="How long a closed trace's spans are kept so that a span arriving late "
        "rebuilds its records as a revision (within max_held_bytes: the oldest kept trace "
        "goes first when room is needed). 0 keeps none.",
    )
    max_open_traces: int = Field(
        10_000,
        ge=1,
        description="Traces being assembled. While 90% of it are open, a request that opens "
        "a new trace first closes the least recently active open traces (as partial when "
        "their root has not arrived) to make room.",
    )
    max_held_bytes: int = Field(
        128 * 1024 * 1024,
        ge=1024 * 1024,
        description="OTLP bytes held by open traces and completed traces waiting for "
        "evaluation (closed traces kept for late spans use what is left). Past 90% of it "
        "the least recently active open traces are closed for evaluation and requests that "
        "open new traces, past 100% all requests, are refused with a retryable answer "
        "(HTTP 503, gRPC UNAVAILABLE) until evaluation has freed room.",
    )
    max_spans_per_trace: int = Field(
        1_000, ge=1, description="Spans kept per trace; further spans are refused (partial)."
    )
    remember_closed: int = Field(
        100_000,
        ge=0,
        description="Closed trace ids remembered (with their spans while keep_closed_s and "
        "max_held_bytes allow): a straggler is then a revision, or counted as a late span; "
        "never a trace of its own.",
    )
    tick_s: float = Field(0.1, gt=0, description="How often completion is checked.")


Rate = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        description="Share of records (by trace id) the tier evaluates; per-route rates and "
        "priority rules (evaluation.sampling) add more.",
    ),
]
BatchSize = Annotated[int, Field(ge=1, description="Records evaluated together.")]
MaxWait = Annotated[float, Field(ge=0, description="Longest wait to fill a batch.")]
MaxQueue = Annotated[
    int,
    Field(
        ge=1,
        description="Records waiting for the tier; beyond it the tier is skipped for the "
        "record (counted, reason queue_full).",
    ),
]
MaxDelay = Annotated[
    float,
    Field(
        gt=0,
        description="Longest a record waits in the tier's queue (a model load in progress "
        "included); past it the tier is skipped for the record (counted, reason deadline).",
    ),
]


class TierSettings(_Section):
    """What both costly tiers (``evaluation.model``, ``evaluation.judge``) take, under the
    same names: which records reach the tier, how they are batched, and how long and how
    many may wait. Each tier gives its own defaults."""

    rate: Rate
    batch_size: BatchSize
    max_wait_s: MaxWait
    max_queue: MaxQueue
    max_delay_s: MaxDelay

    @property
    def time_budget(self) -> float | None:
        """Share of wall-clock time the tier may spend evaluating; None: unbounded."""
        return None


AUTO_RATE = "auto"


def _share_or_auto(value: Any) -> Any:
    """A rate: ``auto``, or a share in [0, 1] (one error, not one per kind it could be)."""
    if value == AUTO_RATE:
        return value
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise PydanticCustomError(
            "float_parsing", "Input should be a valid number between 0 and 1, or auto"
        ) from None
    if not 0 <= share <= 1:
        raise PydanticCustomError("rate_range", "Input should be between 0 and 1, or auto")
    return share


class ModelTierSettings(TierSettings):
    """The model tier: local models (embeddings, probes, NLI, classifiers) on a sample."""

    rate: Annotated[float | Literal["auto"], BeforeValidator(_share_or_auto)] = Field(  # type: ignore[assignment]
        0.1,
        description="Share of records (by trace id) the tier evaluates, or auto: every record "
        "it can finish within max_delay_s, shedding the rest by a trace-id threshold that "
        "follows its measured throughput (the threshold is written on each record). Left "
        "unset, auto when the models run on a GPU (0.1 on the CPU). Per-route rates and "
        "priority rules (evaluation.sampling) add more.",
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda|cuda:\d+|mps)$",
        description="Where the models run: auto (the first CUDA device torch sees, else the "
        "CPU), cpu, cuda, cuda:N or mps. A device torch does not see is an error at start.",
    )
    dtype: Literal["auto", "bf16", "fp16", "fp32"] = Field(
        "auto",
        description="Number format of the torch models: auto (bf16 on GPUs that have it, "
        "fp16 on other GPUs and mps, fp32 on the CPU), bf16, fp16 or fp32. onnx models run "
        "fp32 (int8 with quantize).",
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=64,
        description="Padded tokens per forward pass (rows x the longest row): the detectors' "
        "texts and pairs of many records share passes up to it, grouped by length; a "
        "detector's batch_size bounds the rows. Unset: 4096 on the CPU, 32768 on a GPU.",
    )
    batch_size: BatchSize = 16
    max_wait_s: MaxWait = 0.2
    max_queue: MaxQueue = 256
    max_delay_s: MaxDelay = 10.0
    budget: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Share of time the model tier may spend evaluating (seconds of work per "
        "second, over a 2 s window: busy time on the CPU, host CPU time of the tier's "
        "threads on a GPU); a record is refused (counted, reason budget) only when the work "
        "queued before it could not be done within max_delay_s at that share. 0 = the tier "
        "never runs and its models never load.",
    )

    @property
    def time_budget(self) -> float | None:
        return self.budget

    @property
    def rate_given(self) -> bool:
        """Whether the settings name a rate (else a GPU makes it auto)."""
        return "rate" in self.model_fields_set


class JudgeSettings(TierSettings):
    """LLM judges over any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp)."""

    rate: Rate = 0.01
    batch_size: BatchSize = 8
    max_wait_s: MaxWait = 0.5
    max_queue: MaxQueue = 128
    max_delay_s: MaxDelay = Field(
        60.0,
        description="Longest a record waits in the judge's queue; past it the judge is skipped "
        "for the record (counted, reason deadline). Calls in flight are bounded by timeout_s.",
    )
    base_url: str | None = Field(None, description="e.g. https://api.openai.com/v1; unset = off.")
    model: str | None = None
    api_key: SecretStr | None = Field(None, description="Falls back to OPENAI_API_KEY.")
    calls_per_minute: int = Field(60, ge=1)
    tokens_per_minute: int = Field(100_000, ge=1)
    over_budget: Literal["auto", "skip", "wait"] = Field(
        "auto",
        description="A record the minute's budget has no room for: skip it (cheap scores "
        "stand) or wait for the window; auto = skip in serve, wait in ragpulse eval.",
    )
    concurrency: int = Field(4, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0, description="On 429/5xx, honouring Retry-After.")
    structured: Literal["auto", "json_schema", "json_object"] = "auto"
    temperature: float = 0.0
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="Cap on each judge reply (tokens): a small model that runs on is cut there "
        "and the result is an error (truncated). Unset: the server's own limit.",
    )
    cache: str = Field(
        "auto",
        description="auto (disk in ragpulse eval, memory in serve), memory, disk (SQLite in "
        "$RAGPULSE_CACHE_DIR, kept between runs), disk:PATH, or a redis:// URL.",
        pattern=r"^(auto|memory|disk|disk:.+|(redis|rediss|unix)://.+)$",
    )
    cache_size: int = Field(10_000, ge=0, description="Entries kept in memory.")
    cache_max_mb: int = Field(
        512, ge=1, description="The disk cache's bound; past it the oldest entries go."
    )
    cache_max_age_days: float = Field(
        30.0, gt=0, description="Disk cache entries older than this are deleted."
    )

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)

    def key(self) -> str:
        if self.api_key:
            return self.api_key.get_secret_value()
        return os.environ.get("OPENAI_API_KEY", "") or "not-needed"


class PriorityRule(_Section):
    """Force costly tiers on records that matter, whatever the base rates say."""

    when: Literal["error", "low_score", "injection", "negative_feedback", "latency_above"]
    tiers: list[Literal["model", "judge"]]
    metric: str | None = Field(None, description="low_score: the metric (any cheap method).")
    below: float | None = Field(
        None, description="low_score: the threshold on the quality scale (1 - risk for risks)."
    )
    ms: float | None = Field(None, description="latency_above: the pipeline latency threshold.")


def _default_priorities() -> list[PriorityRule]:
    return [
        PriorityRule(when="error", tiers=["model"]),
        PriorityRule(when="low_score", metric="faithfulness", below=0.5, tiers=["judge"]),
        PriorityRule(when="injection", tiers=["judge"]),
        PriorityRule(when="negative_feedback", tiers=["model", "judge"]),
    ]


class SamplingSettings(_Section):
    """Which records the costly tiers see, decided from the trace id (same on every replica)."""

    routes: dict[str, dict[Literal["model", "judge"], float]] = Field(
        default_factory=dict, description="Per-route base rates, e.g. {'/ask': {'judge': 0.1}}."
    )
    priorities: list[PriorityRule] = Field(default_factory=_default_priorities)


class EvaluationSettings(_Section):
    evaluators: list[str] | None = Field(
        None, description="metric/method names or bare metric names; empty = every cheap one."
    )
    batch_size: int = Field(64, ge=1)
    max_wait_s: float = Field(0.05, ge=0, description="Longest wait to fill a batch.")
    max_backlog: int = Field(
        5_000, ge=1, description="Completed traces waiting; beyond it intake answers 503."
    )
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Constructor keyword arguments per evaluator name.",
    )
    max_text_chars: int = Field(
        200_000,
        ge=1_000,
        description="Longest text (question, answer, one document) evaluated; a longer one is "
        "cut to its first max_text_chars characters and every result of the record says so "
        "(details.truncated_input: field, chars, evaluated_chars). Bounds memory and time per "
        "record in every tier.",
    )
    max_record_chars: int = Field(
        1_000_000,
        ge=1_000,
        description="Most characters evaluated per record (question, answer, then documents in "
        "order); documents past it are cut or left out, and the results say so.",
    )
    max_export_delay_s: float = Field(
        2.0,
        ge=0,
        description="Longest a record sampled for a costly tier waits before its results go "
        "to the sinks: what exists then is exported (ragpulse.pending names the tiers still "
        "running) and each costly tier's results follow as an update of the record "
        "(ragpulse.update names the tier). 0 = export the cheap results at once.",
    )
    model: ModelTierSettings = ModelTierSettings()
    judge: JudgeSettings = JudgeSettings()
    sampling: SamplingSettings = SamplingSettings()

    def tier(self, name: Literal["model", "judge"]) -> TierSettings:
        """The settings of the costly tier called ``name``."""
        return self.model if name == "model" else self.judge


DEFAULT_RETRIEVAL_TOOLS = ("*search*", "*retriev*", "*lookup*", "*knowledge*")
DEFAULT_SENSITIVE_TOOLS = (
    "*send*", "*forward*", "*transfer*", "*pay*", "*delete*", "*share*", "*grant*", "*post*",
    "*update*", "*create*", "*invite*", "*refund*", "*withdraw*", "*purchase*", "*buy*",
    "*sell*", "*unlock*", "*upload*", "*publish*", "*move*", "*cancel*", "*execute*",
    "*approve*", "*disable*", "*reset*",
)  # fmt: skip
"""Tools that act on the world, as ``agents.sensitive_tools`` names them by default."""


class AgentSettings(_Section):
    """Agent turns: which tools retrieve, which act on the world, which Prometheus names, and
    bounds."""

    retrieval_tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_RETRIEVAL_TOOLS),
        description="Glob patterns (case-insensitive) of tool names whose results count for "
        "context relevance and the retrieval metrics, beside tools typed datastore "
        "(gen_ai.tool.type) and tools whose result is a list of documents. Every tool result "
        "is evidence for faithfulness.",
    )
    sensitive_tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SENSITIVE_TOOLS),
        description="Glob patterns (case-insensitive) of tool names whose calls act on the "
        "world (send, pay, delete, share, grant, ...): a value that travelled from a tool result "
        "that reads as an instruction into such a call is what injection_followed/agent scores "
        "as a hijack.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Tool names kept as the tool label of the agent series; every other tool "
        "is 'other', so that every replica labels alike.",
    )
    max_tool_calls: int = Field(
        1_000, ge=1, description="Tool calls kept per turn; the rest are counted, not kept."
    )
    max_result_chars: int = Field(
        1_000_000,
        ge=1_000,
        description="Longest tool result read; a longer one is cut there (and not parsed as "
        "JSON), and the record says so.",
    )


class ConversationSettings(_Section):
    """Conversations (chat sessions): how a turn finds its conversation and history, when a
    conversation closes, and the bounds of what is kept."""

    id_attributes: list[str] = Field(
        default_factory=list,
        description="Span attributes that carry a conversation id, read after "
        "gen_ai.conversation.id and session.id.",
    )
    idle_s: float = Field(
        300.0, gt=0, description="A conversation closes after this long without a new turn."
    )
    keep_closed_s: float = Field(
        3600.0,
        ge=0,
        description="A closed conversation that resumes within this is revised (the same "
        "identifier in every sink), not started anew.",
    )
    max_open: int = Field(
        10_000,
        ge=1,
        description="Conversations held open (and closed ones kept for resuming); past it the "
        "oldest is closed early, counted.",
    )
    max_turns: int = Field(
        1_000, ge=1, description="Turns kept per conversation; later ones are counted only."
    )
    max_history_messages: int = Field(
        20, ge=0, description="Messages of the conversation so far kept on a turn's record."
    )
    max_message_chars: int = Field(
        2_000, ge=100, description="Characters kept of each message of the history."
    )
    join_turns: int = Field(
        5,
        ge=0,
        description="Earlier turns joined into a turn whose spans carry no history (apps "
        "traced by ragpulse's decorators).",
    )
    tick_s: float = Field(1.0, gt=0, description="How often idle conversations are closed.")


class KafkaSettings(_Section):
    """Kafka intake (``source: kafka``), the re-key stage, and the app-side exporter."""

    bootstrap: str = Field("127.0.0.1:9092", description="host:port[,host:port...]")
    topic: str = Field("otlp_spans", description="Spans keyed by trace id (evaluated here).")
    group: str = "ragpulse"
    encoding: Literal["otlp_proto", "otlp_json"] = "otlp_proto"
    dead_letter_topic: str | None = Field(
        "otlp_spans_dlq", description="Poison messages go here; empty = count and skip."
    )
    max_message_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_poll_records: int = Field(500, ge=1)
    commit_interval_s: float = Field(1.0, gt=0)
    lag_interval_s: float = Field(5.0, gt=0)
    pause_ratio: float = Field(
        0.8, gt=0, le=1, description="Pause fetching at this share of a bound; resume at half."
    )
    session_timeout_ms: int = Field(10_000, ge=1)
    heartbeat_interval_ms: int = Field(3_000, ge=1)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    rekey_input_topic: str = Field(
        "otlp_spans_raw", description="Unkeyed batches that `ragpulse rekey` splits by trace."
    )
    rekey_group: str = "ragpulse-rekey"
    conversation_topic: str | None = Field(
        None,
        description="Turn records re-keyed by conversation id, so that one member of the "
        "conversation group sees all of a conversation's turns; unset: '<group>_turns'; '' = "
        "each process keeps the conversations of the traces it reads (one replica only).",
    )
    conversation_group: str | None = Field(
        None,
        description="Consumer group reading conversation_topic; unset: '<group>-conversations'.",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    client_options: dict[str, Any] = Field(
        default_factory=dict, description="Passed as-is to every kafka-python client."
    )
    consumer_options: dict[str, Any] = Field(
        default_factory=dict, description="Passed as-is to kafka-python consumers only."
    )

    def turn_topic(self) -> str | None:
        """The conversation topic in effect (None: conversations are kept in each process)."""
        if self.conversation_topic is None:
            return f"{self.group}_turns"
        return self.conversation_topic or None

    def turn_group(self) -> str:
        return self.conversation_group or f"{self.group}-conversations"

    def client_config(self) -> dict[str, Any]:
        """Connection and security settings shared by consumers and producers."""
        config: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.security_protocol,
        }
        for key in ("sasl_mechanism", "sasl_plain_username", "ssl_cafile", "ssl_certfile"):
            if getattr(self, key):
                config[key] = getattr(self, key)
        if self.ssl_keyfile:
            config["ssl_keyfile"] = self.ssl_keyfile
        if self.sasl_plain_password:
            config["sasl_plain_password"] = self.sasl_plain_password.get_secret_value()
        return {**config, **self.client_options}

    def consumer_config(self, group_id: str) -> dict[str, Any]:
        """Everything a ``KafkaConsumer`` of ``group_id`` takes from these settings (the span
        group's and the conversation group's consumers alike); ``consumer_options`` last."""
        return {
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": self.auto_offset_reset,
            "max_poll_records": self.max_poll_records,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_partition_fetch_bytes": max(self.max_message_bytes, 1024 * 1024),
            # kafka-python's defaults block up to 30 s per bootstrap attempt and back off up
            # to 30 s between reconnects: too long to notice a stop, or a restarted broker.
            # consumer_options can still override both.
            "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
            "reconnect_backoff_max_ms": BOOTSTRAP_TIMEOUT_MS,
            **self.client_config(),
            **self.consumer_options,
        }


BOOTSTRAP_TIMEOUT_MS = 5000
"""How long a Kafka client waits for the broker per attempt, and backs off at most."""


class StoredTracesSettings(_Section):
    """Reading the traces a tracing tool already stores: ``ragpulse eval --from URL`` once,
    ``ragpulse serve --source <tool>`` following new ones (the registered tools, with the
    shape of each one's URL, are listed by ``ragpulse serve --help``)."""

    url: str | None = Field(
        None,
        description="The tool's URL, TOOL://HOST:PORT/... in the shape ragpulse serve --help "
        "gives for each tool under --source-url (TOOL+https://... for TLS). Credentials never "
        "go in the URL: see api_key, username/password, public_key/secret_key.",
    )
    poll_s: float = Field(5.0, gt=0, description="Follow mode: how often new traces are read.")
    overlap_s: float = Field(
        300.0,
        ge=0,
        description="Follow mode: each poll reads again from this long before its position "
        "(spans reach a tool after they start: the export delay plus the trace's duration), "
        "dropping spans it already has by span id. Also what a first start reads back.",
    )
    state_file: Path | None = Field(
        None,
        description="Follow mode: where the position is kept between runs; unset = "
        "$RAGPULSE_CACHE_DIR/sources/<tool>-<hash of the URL>.json.",
    )
    page_spans: int = Field(
        500, ge=1, le=1000, description="Most spans (Phoenix, Langfuse) or traces (MLflow search) "
        "asked for per page."
    )  # fmt: skip
    page_bytes: int = Field(
        16 * 1024 * 1024,
        ge=64 * 1024,
        description="Longest answer read (after decompression); a larger page is asked for "
        "again in halves.",
    )
    traces_per_request: int = Field(
        20, ge=1, le=100, description="Traces whose spans are fetched in one request."
    )
    timeout_s: float = Field(30.0, gt=0, description="Per request.")
    retry_for_s: float = Field(
        60.0,
        gt=0,
        description="How long one request is retried (network errors, 408, 429, 5xx, with "
        "backoff honouring Retry-After) before the tool counts as unreachable.",
    )
    backoff_s: float = Field(0.5, gt=0, description="First retry delay; doubles on each retry.")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest delay between two tries.")
    write_back: bool = Field(
        True,
        description="Results go back to the same tool (Phoenix annotations, MLflow "
        "assessments, Langfuse scores), through its sink, set up from the URL and these "
        "credentials unless sinks.<tool> is given.",
    )
    api_key: SecretStr | None = Field(
        None,
        description="Phoenix API key, or MLflow token; falls back to PHOENIX_API_KEY / "
        "MLFLOW_TRACKING_TOKEN.",
    )
    username: str | None = Field(
        None, description="MLflow basic auth; falls back to MLFLOW_TRACKING_USERNAME."
    )
    password: SecretStr | None = Field(
        None, description="MLflow basic auth; falls back to MLFLOW_TRACKING_PASSWORD."
    )
    public_key: str | None = Field(None, description="Langfuse; falls back to LANGFUSE_PUBLIC_KEY.")
    secret_key: SecretStr | None = Field(
        None, description="Langfuse; falls back to LANGFUSE_SECRET_KEY."
    )


RedactionPath = Literal["jsonl", "otel", "prometheus", "logs", "regression", "eval_output"]
"""Where content leaves the process: the results JSONL, the OTel evaluation export, the
Prometheus route/service labels, log lines, regression sets, ``ragpulse eval``'s output."""

DEFAULT_REDACTION_PATHS: tuple[RedactionPath, ...] = (
    "jsonl",
    "otel",
    "prometheus",
    "logs",
    "regression",
)
"""Every path but ``eval_output``: that file is the user's own rows given back with scores,
so it is rewritten only when asked (``apply_to`` naming it)."""


class RedactionSettings(_Section):
    """Personal data replaced by placeholders before content leaves the process."""

    enabled: bool = Field(True, description="false = nothing is redacted anywhere.")
    emails: bool = True
    phone_numbers: bool = True
    card_numbers: bool = Field(True, description="Luhn-checked: ordinary long numbers stay.")
    destination_domains: bool = Field(
        True,
        description="An e-mail address that an evaluator names as a destination (where a "
        "hijack or an exfiltration sends data) keeps its domain: [EMAIL]@example.org. A domain "
        "can identify a small organisation: false redacts it too.",
    )
    patterns: dict[str, str] = Field(
        default_factory=dict, description="name -> regex; matches become [NAME]."
    )
    apply_to: list[RedactionPath] = Field(
        default_factory=lambda: list(DEFAULT_REDACTION_PATHS),
        description="Where it applies: jsonl, otel, prometheus, logs, regression, eval_output "
        "(the last is off by default: ragpulse eval gives the user's rows back as they were).",
    )

    def applies_to(self, path: RedactionPath) -> bool:
        return self.enabled and path in self.apply_to


class Settings(_Section):
    """Everything ``ragpulse serve`` needs: the defaults and what is given; the file and
    the environment are read by :func:`load_settings`."""

    source: str = Field(
        "otlp_http",
        description="Where spans come from: the OTLP/HTTP receiver, Kafka, or the traces a "
        "tracing tool stores (stored_traces.url).",
        json_schema_extra={"registry": "ragpulse.sources"},
    )
    host: str = "127.0.0.1"
    otlp_http_port: int = Field(4318, ge=0, le=65535)
    otlp_grpc_port: int = Field(
        4317, ge=0, le=65535, description="OTLP/gRPC receiver port (0 = no gRPC receiver)."
    )
    metrics_port: int = Field(9464, ge=0, le=65535)
    auth_token: SecretStr | None = Field(
        None, description="Bearer token the OTLP receiver requires (none = open)."
    )
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="After decompression.")
    shutdown_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Bound on a graceful stop (SIGTERM): open traces are drained through "
        "evaluation until then; what is left is skipped (costly tiers) or left unacknowledged.",
    )
    assembly: AssemblySettings = AssemblySettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    agents: AgentSettings = AgentSettings()
    conversations: ConversationSettings = ConversationSettings()
    kafka: KafkaSettings = KafkaSettings()
    stored_traces: StoredTracesSettings = StoredTracesSettings()
    redaction: RedactionSettings = Field(
        default_factory=RedactionSettings,
        description="E-mails, phone and card numbers (and custom patterns) redacted wherever "
        "content leaves the process; see apply_to.",
    )
    sinks: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Options per sink, by entry-point name (built-in or third-party); naming a "
        "sink enables it, {enabled: false} turns one off. Validated by the sink's Options.",
    )
    sources: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Options of a third-party source, by entry-point name, validated by the "
        "source's Options; ragpulse's own sources read theirs where they are (the receivers' "
        "keys above, kafka, stored_traces).",
    )

    @field_validator("source")
    @classmethod
    def _registered_source(cls, value: str) -> str:
        """A source registered under ``ragpulse.sources`` (its class is not imported here)."""
        from ragpulse import plugin_index
        from ragpulse.suggestions import did_you_mean

        known = sorted(plugin_index.group(plugin_index.SOURCE_GROUP))
        if value not in known:
            listed = f"{', '.join(known[:-1])} or {known[-1]}" if len(known) > 1 else "".join(known)
            raise ValueError(
                f"should be a registered source{did_you_mean(value, known)}: {listed or 'none'}"
            )
        return value


def read_config_file(path: Path) -> dict[str, Any]:
    # Nesting is bounded (safe_json.MAX_DEPTH) before or while parsing: the parsers
    # recurse per level and would fail with RecursionError on a deeply nested file.
    import yaml  # here: most runs read no file, and the import costs a run ~25 ms

    from ragpulse import safe_json, safe_yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        if path.suffix == ".toml":
            safe_json.check_depth(text, what="TOML")
            data = tomllib.loads(text)
        else:
            data = safe_yaml.load_yaml(text)
    except (tomllib.TOMLDecodeError, yaml.MarkedYAMLError) as exc:
        from ragpulse.settings_report import parse_problem

        raise parse_problem(path, exc) from exc
    except (ValueError, yaml.YAMLError, RecursionError) as exc:  # too deep
        raise ConfigError(f"config file {path} does not parse: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


SettingsCheck = Callable[["Settings"], list[tuple[tuple[str, ...], str, str]]]
"""A check of valid settings: (setting path, what is wrong, hint) per problem."""


def load_settings(
    config_file: str | Path | None = None,
    *,
    checks: Sequence[SettingsCheck] = (),
    **overrides: Any,
) -> Settings:
    """Resolve settings; ``overrides`` (from CLI flags) win, ``None`` values are ignored.

    Every problem is reported at once, in one :class:`~ragpulse.errors.ConfigError`
    (:class:`~ragpulse.settings_report.SettingsProblems`): each line names where the
    value came from (file and line, variable or flag), the setting, what is wrong and,
    for a mistyped name, the closest real one. ``checks`` need valid settings (the
    commands pass :func:`ragpulse.plugins.plugin_problems`: plug-in options, evaluator
    names); they run on the rest when part is invalid, so that one run says it all.
    """
    from ragpulse.settings_report import Origins, Problem, SettingsProblems, problems_of

    path = config_file or os.environ.get(CONFIG_ENV)
    file = Path(path) if path else None
    file_data = read_config_file(file) if file else {}  # unreadable: one line, at once
    flags = {k: v for k, v in overrides.items() if v is not None}
    origins = Origins.gather(flags, file, file_data)
    problems = [Problem(var, "", what, hint) for var, what, hint in environment_problems(Settings)]
    try:
        settings: Settings | None = _build(file_data, flags)
    except ValidationError as exc:
        unknown = {p.where for p in problems}  # said already: not again as an unknown key
        problems += [p for p in problems_of(exc, Settings, origins) if p.where not in unknown]
        settings = _the_rest(file_data, flags, exc)
    for check in checks:
        for setting, what, hint in check(settings) if settings is not None else ():
            problems.append(Problem(origins.of(setting), ".".join(setting), what, hint))
    if problems:
        raise SettingsProblems(sorted(problems, key=Problem.order))
    assert settings is not None
    return settings


def _build(file_data: dict[str, Any], flags: dict[str, Any]) -> Settings:
    if not file_data and not reads_settings(os.environ):
        return Settings(**flags)  # nothing else to read: no pydantic-settings to import
    from ragpulse.settings_sources import settings_from_sources

    return settings_from_sources(Settings, file_data, flags)


def _the_rest(
    file_data: dict[str, Any], flags: dict[str, Any], exc: ValidationError
) -> Settings | None:
    """The settings without what ``exc`` found wrong (None if still invalid), so that the
    later checks report their problems in the same run."""
    from ragpulse.settings_report import env_names, without

    bad = [tuple(str(part) for part in error["loc"]) for error in exc.errors()]
    hidden = {name for path in bad for name in env_names(path) if name in os.environ}
    saved = {name: os.environ.pop(name) for name in hidden if name in os.environ}
    try:
        return _build(without(file_data, bad), without(flags, bad))
    except ValidationError:
        return None
    finally:
        os.environ.update(saved)
