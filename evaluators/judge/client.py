"""The judge client: the ``openai`` package's AsyncOpenAI against any compatible server.

Structured outputs with a JSON schema generated from the prompt's pydantic
output model; servers that refuse ``json_schema`` are switched to JSON mode
(schema in the prompt, validated here). Timeouts, and retries with backoff on
429/5xx honouring ``Retry-After`` (the openai client's own). A concurrency
limit, a content-addressed cache, a shared budget, and accounting of calls and
tokens from ``usage`` (cached prompt tokens too: OpenAI's
``prompt_tokens_details.cached_tokens``, else llama.cpp's ``timings.cache_n``).

Replies that do not fit the schema (small models do this, and any model in JSON
mode can): a reply with text around one JSON object is read from its outermost
braces (outcome ``extracted``); otherwise one repair retry shows the judge its
reply and the validation error (``repaired``); a second miss is a
``JudgeError("invalid_output")``. A reply cut at ``max_tokens`` is not repaired
(the model would most likely run on again): ``JudgeError("truncated")``. Either
way the metric gets an error result with that reason and the calls counter an
outcome of the same name; a guessed score is never made up.

The client runs its own event loop on a daemon thread; evaluators call it
from the judge stage's worker thread through :meth:`JudgeClient.run`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import openai
from pydantic import BaseModel, ValidationError

from ragpulse.config import JudgeSettings
from ragpulse.evaluators.judge.budget import Budget, before_call
from ragpulse.evaluators.judge.cache import JudgeCache, cache_for, cache_key
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.evaluators.judge.usage import JudgeError, Usage
from ragpulse.telemetry import JudgeMetrics

log = logging.getLogger(__name__)
O = TypeVar("O", bound=BaseModel)  # noqa: E741
T = TypeVar("T")

PROBE_TIMEOUT_S = 5.0
"""The start-up probe's bound (GET {base_url}/models, no retry); it only ever logs."""
CLOSE_WAIT_S = 2.0
"""close(): how long the probe and then the loop's thread may take to stop."""
_UNREACHABLE = ("connection_error", "timeout", "auth_error")
FAILURES_BEFORE_WARNING = 3
"""Calls in a row that must fail (unreachable, timeout, refused key) before the judge is
reported unusable: one slow answer among good ones is not an outage."""


def display_url(url: str | None) -> str:
    """The endpoint as logs and results show it: without credentials in the URL."""
    parts = urlsplit(str(url))
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _schema_refused(exc: openai.BadRequestError) -> bool:
    text = str(exc).lower()
    return "response_format" in text or "json_schema" in text or "schema" in text


class JudgeClient:
    """One per (base_url, model): shared by the judge metrics so budget and cache are too."""

    def __init__(
        self,
        settings: JudgeSettings,
        metrics: JudgeMetrics,
        cache: JudgeCache | None = None,
        budget: Budget | None = None,
    ) -> None:
        if not settings.configured:
            raise JudgeError("not_configured", "set judge base_url and model")
        self.settings = settings
        self.model = str(settings.model)
        self.url = display_url(settings.base_url)
        self._warned = False  # "cannot be used" is said once per outage, not per record
        self._failures = 0  # calls failed in a row for an unreachable judge
        self._warn_lock = threading.Lock()  # the probe's thread and the loop's may race
        self.metrics = metrics
        self.cache = cache if cache is not None else cache_for(settings)
        self.budget = budget or Budget(settings.calls_per_minute, settings.tokens_per_minute)
        self._mode = "json_object" if settings.structured == "json_object" else "json_schema"
        self._loop = asyncio.new_event_loop()
        self._io = threading.Thread(
            target=self._loop.run_forever, name="ragpulse-judge-io", daemon=True
        )
        self._io.start()
        self._probing: asyncio.Task[None] | None = None
        self._semaphore = asyncio.Semaphore(settings.concurrency)

        async def count_retryable(response: Any) -> None:
            if response.status_code == 429 or response.status_code >= 500:
                self.metrics.retries.labels(str(response.status_code)).inc()

        # The openai package's own HTTP client class (httpx in 1.x, httpx2 in 3.x), so the
        # hook sees every response, retries included, whichever major version is installed.
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.key(),
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
            http_client=openai.DefaultAsyncHttpxClient(
                timeout=settings.timeout_s, event_hooks={"response": [count_retryable]}
            ),
        )

    def probe(self) -> None:
        """Ask ``GET {base_url}/models`` once, on the client's loop, and log what it says.

        An unreachable judge (or a refused key, or an unknown model) is then one warning
        naming the URL at start, instead of an error per record later. Nothing waits for
        the probe and nothing fails by it: a slow judge only gets a note. It runs on the
        loop (not a thread of its own) so that :meth:`close` can cancel it: a thread
        still loading TLS certificates while the interpreter exits crashes it.
        """
        # Built here, on the caller's thread: the TLS context is made with the client.
        client = openai.AsyncOpenAI(
            base_url=self.settings.base_url,
            api_key=self.settings.key(),
            timeout=PROBE_TIMEOUT_S,
            max_retries=0,
        )

        async def start() -> asyncio.Task[None]:
            return asyncio.ensure_future(self._probe(client))

        self._probing = asyncio.run_coroutine_threadsafe(start(), self._loop).result()

    async def _probe(self, client: openai.AsyncOpenAI) -> None:
        try:
            async with client:
                offered = [m.id for m in (await client.models.list()).data]
        except openai.APITimeoutError:  # slow, not absent: the calls will tell
            log.info(
                "LLM judge at %s did not list its models within %.0fs; judge calls will tell "
                "whether it answers",
                self.url, PROBE_TIMEOUT_S,
            )  # fmt: skip
            return
        except openai.APIConnectionError as exc:
            self._unreachable(_cause(exc))
            return
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            self._unreachable(f"the API key is refused ({exc.status_code})")
            return
        except Exception as exc:  # any other answer: the server is there (no /models, say)
            log.debug("judge probe at %s: %s: %s", self.url, type(exc).__name__, exc)
            offered = []
        if offered and self.model not in offered:
            log.warning(
                "LLM judge at %s does not list model %r (it lists %s); calls may fail",
                self.url, self.model, ", ".join(sorted(offered)[:10]),
            )  # fmt: skip
        else:
            log.info("LLM judge: %s at %s", self.model, self.url)

    def _unreachable(self, why: str) -> None:
        with self._warn_lock:
            if self._warned:
                return
            self._warned = True
        log.warning(
            "LLM judge at %s cannot be used: %s. Judge results are errors until it answers "
            "(ragpulse_judge_calls_total counts them; retries are logged at DEBUG)",
            self.url, why,
        )  # fmt: skip

    def _answered(self) -> None:
        """A call got an answer: the judge is usable (again)."""
        with self._warn_lock:
            self._failures = 0
            if not self._warned:
                return
            self._warned = False
        log.warning("LLM judge at %s answers again", self.url)

    def close(self) -> None:
        """Stop the client's event loop and close the cache (the plug-in context closes
        shared clients). The loop's thread is waited for (a call in flight is abandoned
        after CLOSE_WAIT_S), so that nothing of the client still runs while the process
        exits and frees what that thread would touch."""
        probing = self._probing
        if probing is not None and not probing.done() and self._loop.is_running():

            async def settle() -> None:  # a probe still waiting: the calls told by now
                probing.cancel()
                await asyncio.gather(probing, return_exceptions=True)

            with contextlib.suppress(concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(settle(), self._loop).result(CLOSE_WAIT_S)
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._io is not threading.current_thread():
            self._io.join(CLOSE_WAIT_S)
        self.cache.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop from a worker thread; blocks."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    async def ask(self, prompt: Prompt[Any, O], inputs: BaseModel) -> tuple[O, Usage]:
        """The judge's validated answer, from the cache when possible."""
        key = cache_key(prompt.id, self.model, inputs.model_dump(mode="json"))
        hit = self.cache.get(key)
        if hit is not None:
            try:
                self.metrics.cache.labels("hit").inc()
                return prompt.output_model.model_validate_json(hit), Usage(cached=1)
            except ValidationError:
                pass  # an entry from an incompatible output model: ask again
        self.metrics.cache.labels("miss").inc()
        await before_call()  # the record's budget is taken at its first real call
        async with self._semaphore:
            output, usage = await self._ask(prompt, inputs)
        self.cache.put(key, output.model_dump_json())
        return output, usage

    async def _ask(self, prompt: Prompt[Any, O], inputs: BaseModel) -> tuple[O, Usage]:
        usage = Usage()
        messages = prompt.messages(inputs, schema_in_prompt=self._mode == "json_object")
        content, finish = await self._complete(prompt, messages, usage)
        try:
            output, outcome = _parse(prompt.output_model, content)
            self.metrics.calls.labels(self.model, prompt.name, outcome).inc()
            return output, usage
        except ValidationError as exc:
            problem = _short(exc)
        if finish == "length":
            self.metrics.calls.labels(self.model, prompt.name, "truncated").inc()
            limit = self.settings.max_tokens or "the server's default"
            raise JudgeError(
                "truncated",
                f"{prompt.id}: the reply reached max_tokens ({limit}) before its JSON was "
                f"complete ({problem})",
                usage,
            )
        # One repair retry: show the judge its answer and what is wrong with it.
        repair = [
            *messages,
            {"role": "assistant", "content": content[:4000]},
            {
                "role": "user",
                "content": f"That reply is not valid for the required JSON schema ({problem}). "
                "Reply again with only the corrected JSON.",
            },
        ]
        content, _ = await self._complete(prompt, repair, usage)
        try:
            output, _ = _parse(prompt.output_model, content)
        except ValidationError as exc:
            self.metrics.calls.labels(self.model, prompt.name, "invalid_output").inc()
            raise JudgeError("invalid_output", f"{prompt.id}: {_short(exc)}", usage) from exc
        self.metrics.calls.labels(self.model, prompt.name, "repaired").inc()
        return output, usage

    async def _complete(
        self, prompt: Prompt[Any, Any], messages: list[dict[str, str]], usage: Usage
    ) -> tuple[str, str | None]:
        """The reply's text and finish reason (``length``: cut at max_tokens)."""
        start = time.perf_counter()
        try:
            response = await self._create(prompt, messages)
        except openai.BadRequestError as exc:
            if self._mode != "json_schema" or self.settings.structured != "auto":
                raise self._failed(prompt, "bad_request", exc) from exc
            if not _schema_refused(exc):
                raise self._failed(prompt, "bad_request", exc) from exc
            log.warning("judge at %s refuses json_schema; using JSON mode", self.settings.base_url)
            self._mode = "json_object"
            messages = [prompt.system_message(schema_in_prompt=True), *messages[1:]]
            try:
                response = await self._create(prompt, messages)
            except openai.APIError as again:
                raise self._failed(prompt, _reason(again), again) from again
        except openai.APIError as exc:
            raise self._failed(prompt, _reason(exc), exc) from exc
        finally:
            self.metrics.latency.labels(self.model, prompt.name).observe(
                time.perf_counter() - start
            )
        self._answered()
        prompt_tokens = response.usage.prompt_tokens if response.usage else 0
        completion_tokens = response.usage.completion_tokens if response.usage else 0
        cached_tokens = _cached_prompt_tokens(response)
        usage.add(Usage(1, prompt_tokens, completion_tokens, cached_prompt_tokens=cached_tokens))
        self.metrics.tokens.labels(self.model, "prompt").inc(prompt_tokens)
        self.metrics.tokens.labels(self.model, "completion").inc(completion_tokens)
        self.metrics.tokens.labels(self.model, "cached_prompt").inc(cached_tokens)
        # The budget counts every prompt token: a provider bills cached ones too (cheaper).
        self.budget.spend_tokens(prompt_tokens + completion_tokens)
        if not response.choices:
            return "", None
        choice = response.choices[0]
        return choice.message.content or "", choice.finish_reason

    async def _create(self, prompt: Prompt[Any, Any], messages: list[dict[str, str]]) -> Any:
        if self._mode == "json_schema":
            response_format: dict[str, Any] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.name.replace(".", "_"), "schema": prompt.schema()},
            }
        else:
            response_format = {"type": "json_object"}
        # Plain dicts, checked by the server: the SDK's TypedDicts change between releases.
        # max_tokens, not max_completion_tokens: every OpenAI-compatible server reads it.
        # Left out when unset (the SDK's "omitted" sentinel differs between releases).
        limit: dict[str, Any] = {}
        if self.settings.max_tokens is not None:
            limit["max_tokens"] = self.settings.max_tokens
        return await self._client.chat.completions.create(
            model=self.model,
            messages=cast(Any, messages),
            temperature=self.settings.temperature,
            response_format=cast(Any, response_format),
            **limit,
        )

    def _failed(self, prompt: Prompt[Any, Any], reason: str, exc: Exception) -> JudgeError:
        self.metrics.calls.labels(self.model, prompt.name, reason).inc()
        detail = f"{type(exc).__name__}: {_cause(exc)[:300]}"
        if reason in _UNREACHABLE:
            with self._warn_lock:
                self._failures += 1
                failing = self._failures >= FAILURES_BEFORE_WARNING
            if failing:
                self._unreachable(
                    f"{FAILURES_BEFORE_WARNING} calls in a row failed, the last with {detail}"
                )
        return JudgeError(reason, f"{prompt.id}: judge at {self.url}: {detail}")


def _parse(model: type[O], content: str) -> tuple[O, str]:
    """The reply as ``model``, and how it was read: ``ok``, or ``extracted`` when the
    JSON object had to be cut out of surrounding text (a code fence, a preamble).
    Raises the whole reply's ValidationError when neither reading validates."""
    try:
        return model.model_validate_json(content), "ok"
    except ValidationError:
        start, end = content.find("{"), content.rfind("}")
        if 0 <= start < end and (start, end) != (0, len(content) - 1):
            try:
                return model.model_validate_json(content[start : end + 1]), "extracted"
            except ValidationError:
                pass
        raise


def _cached_prompt_tokens(response: Any) -> int:
    """Prompt tokens the server read from its prefix cache: OpenAI's (and llama.cpp's)
    ``usage.prompt_tokens_details.cached_tokens``, else llama.cpp's ``timings.cache_n``."""
    details = getattr(response.usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached is None:
        extra = getattr(response, "model_extra", None) or {}
        timings = extra.get("timings") if isinstance(extra, dict) else None
        cached = timings.get("cache_n") if isinstance(timings, dict) else None
    return cached if isinstance(cached, int) and cached > 0 else 0


def _reason(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.InternalServerError):
        return "server_error"
    if isinstance(exc, openai.APIConnectionError):
        return "connection_error"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth_error"
    return "error"


def _cause(exc: Exception) -> str:
    """The message, with the underlying reason for connection errors ("Connection error."
    alone does not say refused, DNS or TLS)."""
    text = str(exc)
    cause = exc.__cause__
    if isinstance(exc, openai.APIConnectionError) and cause is not None and str(cause):
        text = f"{text.rstrip('.')}: {cause}"
    return text


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
