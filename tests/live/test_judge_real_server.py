"""The judge tier against a real LLM: llama.cpp with SmolLM2-135M (tests/support/llm_server.py).

The 135M model's verdicts are near chance, so nothing here asserts judgement
quality: only the machinery. Schema-constrained output, the JSON-mode fallback,
repair and extraction of malformed replies, timeouts, concurrency, token
accounting from the server's ``usage`` (cached prompt tokens included) and the
budget, all over real HTTP to a real model. Where a test needs the server to
misbehave in a way llama.cpp will not on demand (refuse ``json_schema``, wrap or
garble a reply), a small proxy on 127.0.0.1 sits in front of the real server and
changes only that; every answer still comes from the model.

Real calls cost about 0.5-5 s each on an idle machine (a minute when the cores
are shared), so replies are capped (``max_tokens``: 256 holds any one-verdict
reply, whose reason the schema bounds) and each test makes only a few.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from support.llm_server import LlamaServer

from ragpulse.config import EvaluationSettings, JudgeSettings, Settings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.answer_completeness.llm_judge import JudgeAnswerCompleteness
from ragpulse.evaluators.answer_compliance.llm_judge import JudgeAnswerCompliance
from ragpulse.evaluators.answer_correctness.llm_judge import JudgeAnswerCorrectness
from ragpulse.evaluators.answer_relevance.llm_judge import JudgeAnswerRelevance
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.context_relevance.llm_judge import JudgeContextRelevance
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.evaluators.faithfulness.llm_judge import JudgeFaithfulness
from ragpulse.evaluators.injection.llm_judge import JudgeInjection
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord, Reference
from ragpulse.telemetry import CollectorMetrics

pytestmark = pytest.mark.integration

DOCS = [
    Document(id="kb-1", content="The Pro plan costs 6 dollars per month."),
    Document(id="kb-2", content="Offline mode keeps 500 notes on the device."),
]
QUESTION = "How much does the Pro plan cost?"
ANSWER = "The Pro plan costs 6 dollars per month."
#: What a judge result may honestly be with a 135M model: a score, or an error that says why.
HONEST_ERRORS = {"error:truncated", "error:invalid_output"}


def rec(answer: str = ANSWER, question: str = QUESTION, n: int = 0) -> RagRecord:
    return RagRecord(
        trace_id=f"{n + 1:032x}",
        question=question,
        documents=DOCS,
        answer=answer,
        reference=Reference(answers=["6 dollars per month."]),
    )


def settings(base_url: str, model: str, **kw: Any) -> JudgeSettings:
    # Generous timeout (2 busy cores); no HTTP retries, so each test knows its call count.
    base: dict[str, Any] = {
        "base_url": base_url, "model": model, "timeout_s": 600, "max_retries": 0,
        "max_tokens": 256, "calls_per_minute": 10_000, "tokens_per_minute": 10**9,
        "concurrency": 2,
    }  # fmt: skip
    return JudgeSettings(**{**base, **kw})


def load(
    evaluators: list[Evaluator], judge: JudgeSettings, offline: bool = False
) -> tuple[list[Any], PluginContext]:
    """Evaluators loaded in one fresh context (its own registry, and one shared client)."""
    context = PluginContext(Settings(evaluation=EvaluationSettings(judge=judge)), offline=offline)
    loaded = load_evaluators_safely(evaluators, context)
    assert len(loaded) == len(evaluators), "a judge evaluator did not load"
    return loaded, context


def sample(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def outcomes(metrics: CollectorMetrics) -> dict[str, float]:
    """ragpulse_judge_calls_total summed by outcome."""
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "ragpulse_judge_calls_total":
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0) + s.value
    return out


@dataclass
class Proxy:
    """An HTTP proxy in front of the real server that can refuse json_schema or rewrite
    the model's next replies (``rewrite`` pops one function per reply); usage and the
    rest of the body are the real server's."""

    upstream: str  # http://127.0.0.1:PORT
    refuse_json_schema: bool = False
    rewrite: list[Any] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        fmt = (body.get("response_format") or {}).get("type", "none")
        self.formats.append(fmt)
        self.systems.append(body["messages"][0]["content"])
        if self.refuse_json_schema and fmt == "json_schema":
            error = {"message": "response_format json_schema is not supported",
                     "type": "invalid_request_error"}  # fmt: skip
            return web.json_response({"error": error}, status=400)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.upstream}/v1/chat/completions", json=body) as upstream,
        ):
            status, answer = upstream.status, await upstream.json()
        if status == 200 and self.rewrite:
            message = answer["choices"][0]["message"]
            message["content"] = self.rewrite.pop(0)(message["content"])
        return web.json_response(answer, status=status)


@pytest.fixture
def proxy(llm_server: LlamaServer) -> Iterator[Proxy]:
    upstream = llm_server.base_url.removesuffix("/v1")
    p = Proxy(upstream)
    loop = asyncio.new_event_loop()
    started: concurrent.futures.Future[web.AppRunner] = concurrent.futures.Future()

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", p._chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        p.port = int(runner.addresses[0][1])
        return runner

    def run() -> None:
        try:
            started.set_result(loop.run_until_complete(serve()))
        except BaseException as exc:
            started.set_exception(exc)
            return
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    runner = started.result(60)
    yield p
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(60)
    loop.close()


def test_every_judge_metric_runs_against_the_real_server(llm_server: LlamaServer) -> None:
    """Schema-constrained calls for every judge metric; each result is a score with the
    server's token counts, or an error naming why (the 135M model often runs past
    max_tokens inside a free-text field): never a crash, never a made-up score."""
    classes: list[type[JudgeEvaluator]] = [
        JudgeFaithfulness, JudgeContextRelevance, JudgeAnswerRelevance, JudgeInjection,
        JudgeAnswerCorrectness, JudgeAnswerCompliance, JudgeAnswerCompleteness,
    ]  # fmt: skip
    # 64 tokens hold the one-verdict replies (~25 tokens); the lists run past it sooner.
    judge = settings(llm_server.base_url, "m", max_tokens=64)
    evaluators, context = load([cls() for cls in classes], judge)
    record = rec()
    # Two at a time, as the server has two slots.
    with ThreadPoolExecutor(2) as pool:
        results = [r for [r] in pool.map(lambda ev: ev.evaluate([record]), evaluators)]
    metrics = context.metrics
    scored = [r for r in results if r.score is not None]
    for result in results:
        if result.score is None:
            assert result.label in HONEST_ERRORS, (result.name, result.label, result.error)
            assert result.error and result.details.get("prompts") is None
            # The server answered, off-format: what the failed call cost is still reported.
            assert result.details["calls"] >= 1 and result.details["prompt_tokens"] > 0
        else:
            assert 0.0 <= result.score <= 1.0
            assert result.details["calls"] >= 1 and result.details["prompt_tokens"] > 0
            assert result.details["completion_tokens"] > 0
            assert 0 <= result.details["cached_prompt_tokens"] <= result.details["prompt_tokens"]
            assert result.details["model"] == "m"
    # The single-verdict prompts fit: at least one metric is scored.
    assert scored, [(r.name, r.label, r.error) for r in results]
    by_outcome = outcomes(metrics)
    assert set(by_outcome) <= {"ok", "extracted", "repaired", "truncated", "invalid_output"}
    assert by_outcome.get("truncated", 0) == sum(r.label == "error:truncated" for r in results)
    # Every call the server answered was counted, with its real token counts.
    prompt_tokens = sample(metrics, "ragpulse_judge_tokens_total", model="m", kind="prompt")
    assert prompt_tokens >= sum(r.details["prompt_tokens"] for r in scored) > 0
    context.close()


def test_token_accounting_and_the_servers_prefix_cache(llm_server: LlamaServer) -> None:
    """usage.prompt_tokens_details.cached_tokens reaches Usage, the result and the metric:
    a second record with the same question re-reads the shared prefix from the server's
    KV cache."""
    [ev], context = load([JudgeAnswerRelevance()], settings(llm_server.base_url, "m"))
    [first] = ev.evaluate([rec(n=1)])
    [second] = ev.evaluate([rec("It is 6 dollars a month.", n=2)])
    for r in (first, second):  # an off-format reply's result still carries its usage
        assert r.score is not None or r.label in HONEST_ERRORS, (r.label, r.error)
    # System prompt, examples and the question: the same bytes, so the same tokens.
    assert 0 < second.details["cached_prompt_tokens"] < second.details["prompt_tokens"]
    assert second.details["cached_prompt_tokens"] > first.details["prompt_tokens"] // 2
    metrics = context.metrics
    total = sample(metrics, "ragpulse_judge_tokens_total", model="m", kind="cached_prompt")
    assert total == first.details["cached_prompt_tokens"] + second.details["cached_prompt_tokens"]
    prompt = sample(metrics, "ragpulse_judge_tokens_total", model="m", kind="prompt")
    assert prompt == first.details["prompt_tokens"] + second.details["prompt_tokens"]
    context.close()


def test_json_mode_fallback_when_the_server_refuses_schemas(proxy: Proxy) -> None:
    proxy.refuse_json_schema = True
    # No grammar in JSON mode: the reply may ramble, so it is capped shorter.
    [ev], context = load([JudgeAnswerRelevance()], settings(proxy.base_url, "m", max_tokens=64))
    [result] = ev.evaluate([rec()])
    # Refused once, then JSON mode (twice if the reply needed a repair).
    assert proxy.formats[0] == "json_schema" and set(proxy.formats[1:]) == {"json_object"}
    assert len(proxy.formats) in (2, 3)
    assert "JSON schema of the answer" in proxy.systems[-1]
    # Without a grammar the 135M model may answer off-format: a score or an honest error.
    assert result.score is not None or result.label in HONEST_ERRORS, (result.label, result.error)
    context.close()


def test_malformed_replies_are_extracted_repaired_or_errors(proxy: Proxy) -> None:
    """Policy: JSON inside other text is cut out (``extracted``); a reply that is not
    valid gets one repair call (``repaired``); a second bad reply is ``invalid_output``."""
    [ev], context = load([JudgeAnswerRelevance()], settings(proxy.base_url, "m"))
    metrics = context.metrics

    def fenced(content: str) -> str:
        return f"Sure! Here is my verdict:\n```json\n{content}\n```"

    def garbage(content: str) -> str:
        return "The answer looks relevant to me."

    proxy.rewrite = [fenced]
    [extracted] = ev.evaluate([rec(n=1)])
    assert extracted.score is not None and extracted.details["calls"] == 1
    proxy.rewrite = [garbage]
    [repaired] = ev.evaluate([rec("Six dollars.", n=2)])
    assert repaired.score is not None and repaired.details["calls"] == 2
    proxy.rewrite = [garbage, garbage]
    [failed] = ev.evaluate([rec("Six dollars a month.", n=3)])
    assert failed.score is None and failed.label == "error:invalid_output"
    assert "answer_relevance.verdict@" in (failed.error or "")
    labels = {"model": "m", "prompt": "answer_relevance.verdict"}
    for outcome in ("extracted", "repaired", "invalid_output"):
        count = sample(metrics, "ragpulse_judge_calls_total", **labels, outcome=outcome)
        assert count == 1, outcome
    assert len(proxy.formats) == 5  # 1 + 2 + 2 real calls
    context.close()


def test_a_tiny_timeout_is_an_error_result_and_counted(llm_server: LlamaServer) -> None:
    judge = settings(llm_server.base_url, "m", timeout_s=0.01)
    [ev], context = load([JudgeAnswerRelevance()], judge)
    [result] = ev.evaluate([rec("A reply the server has not cached yet.", n=4)])
    assert result.score is None and result.label == "error:timeout", result.error
    labels = {"model": "m", "prompt": "answer_relevance.verdict", "outcome": "timeout"}
    assert sample(context.metrics, "ragpulse_judge_calls_total", **labels) == 1
    context.close()


def test_several_records_in_flight_all_get_results(llm_server: LlamaServer) -> None:
    [ev], context = load([JudgeAnswerRelevance()], settings(llm_server.base_url, "m"))
    records = [rec(f"The Pro plan costs {n} dollars.", n=10 + n) for n in range(4)]
    results = ev.evaluate(records)  # one batch: four calls, two at a time
    assert len(results) == 4
    for r in results:
        assert r.score is not None or r.label in HONEST_ERRORS, (r.label, r.error)
    assert sum(outcomes(context.metrics).values()) == 4
    context.close()


def test_budget_counts_the_servers_real_usage(llm_server: LlamaServer) -> None:
    """tokens_per_minute against what the server reported: the first record's real
    tokens exhaust a 100-token minute, so the next record is skipped (online)."""
    [ev], context = load(
        [JudgeAnswerRelevance()], settings(llm_server.base_url, "m", tokens_per_minute=100)
    )
    [first] = ev.evaluate([rec(n=20)])
    assert first.details.get("prompt_tokens", 0) > 100 or first.label in HONEST_ERRORS
    [second] = ev.evaluate([rec("Another answer.", n=21)])
    assert second.label == "skipped" and second.score is None
    skipped = {"metric": "answer_relevance", "reason": "budget_tokens"}
    assert sample(context.metrics, "ragpulse_judge_skipped_total", **skipped) == 1
    context.close()


def test_off_format_small_model_is_an_error_while_cheap_scores_stand(
    llm_server: LlamaServer,
) -> None:
    """JSON mode without a grammar and a reply cap too small for any verdict: the 135M
    model cannot produce a valid answer, so the judge result is an error with the reason,
    counted, and the lexical score of the same record stands."""
    judge = settings(llm_server.base_url, "m", structured="json_object", max_tokens=6)
    [lexical, ev], context = load([LexicalFaithfulness(), JudgeAnswerRelevance()], judge)
    record = rec(n=30)
    [cheap] = lexical.evaluate([record])
    [judged] = ev.evaluate([record])
    assert cheap.score is not None
    assert judged.score is None and judged.label in HONEST_ERRORS, (judged.label, judged.error)
    failed = outcomes(context.metrics)
    assert failed.get("truncated", 0) + failed.get("invalid_output", 0) == 1
    context.close()


def test_conversation_judges_run_against_the_real_server(llm_server: LlamaServer) -> None:
    """The conversation judges and the consistency judge over real HTTP to a real model:
    each result a score or an error that says why; a conversation that grows sends only
    what has no verdict yet (the 135M model's verdicts themselves mean nothing)."""
    from ragpulse.evaluators.consistency.llm_judge import JudgeConsistency
    from ragpulse.evaluators.conversation_completeness.llm_judge import (
        JudgeConversationCompleteness,
    )
    from ragpulse.evaluators.knowledge_retention.llm_judge import JudgeKnowledgeRetention
    from ragpulse.evaluators.user_frustration.llm_judge import JudgeUserFrustration
    from ragpulse.record import ConversationRecord, HistoryMessage, TurnSummary

    chat = [
        ("My name is Ada. How much does the Pro plan cost?", ANSWER),
        ("I asked already: how much is the Pro plan?", "The Pro plan costs 6 dollars per month."),
        ("Does it keep notes offline?", "Offline mode keeps 500 notes on the device."),
    ]

    def conversation(turns: int) -> ConversationRecord:
        return ConversationRecord(
            conversation_id="c-1",
            revision=turns - 1,
            turns=[
                TurnSummary(turn=i + 1, trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}",
                            question=q, answer=a)
                for i, (q, a) in enumerate(chat[:turns])
            ],
        )  # fmt: skip

    judges = [JudgeConversationCompleteness(), JudgeKnowledgeRetention(), JudgeUserFrustration()]
    evaluators, context = load([*judges, JudgeConsistency()], settings(llm_server.base_url, "m"))
    *conversation_judges, consistency = evaluators
    with ThreadPoolExecutor(2) as pool:
        first = list(pool.map(lambda e: e.evaluate_conversations([conversation(2)])[0],
                              conversation_judges))  # fmt: skip
        grown = list(pool.map(lambda e: e.evaluate_conversations([conversation(3)])[0],
                              conversation_judges))  # fmt: skip
    for before, after in zip(first, grown, strict=True):
        for result in (before, after):
            assert result.score is not None or result.label in {*HONEST_ERRORS, "not_applicable"}, (
                result.metric, result.label, result.error,
            )  # fmt: skip
            assert result.details.get("calls", 0) <= 1  # one call per conversation and metric
        if before.score is not None:  # its verdicts are cached: the grown record reuses them
            assert after.details["cached"] >= len(before.details["verdicts"])
    follow_up = RagRecord(
        trace_id="f" * 32, question="And offline?", answer="Offline mode keeps 50 notes.",
        history=[HistoryMessage(role="user", content="Offline?", turn=1),
                 HistoryMessage(role="assistant", content="Offline mode keeps 500 notes.", turn=1)],
        turn=2,
    )  # fmt: skip
    [checked] = consistency.evaluate([follow_up])
    assert checked.score in (0.0, 1.0) or checked.label in HONEST_ERRORS, checked
    assert sample(context.metrics, "ragpulse_judge_tokens_total", model="m", kind="prompt") > 0
    context.close()
