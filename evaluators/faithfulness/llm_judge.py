"""``faithfulness/llm_judge``: is every claim of the answer supported by the documents?

By statement (default): call 1 extracts atomic claims from the answer; call 2
gives each claim a verdict against the documents (supported, contradicted,
not_found) with a reason and the supporting document. Score = supported /
claims; an answer without claims scores 1 and says so. Verdicts are cached per
(claim, document), so only claims never judged against these documents are
sent, all in one call: at most two calls per record, often fewer. A pair the
judge leaves out of its answer is cached as "no verdict" (not found), so a rerun
asks nothing again whatever the judge's habits. Whole-answer mode
(``classify_by_statement=false``): one call, verdict 1 or 0 with reasoning.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.cache import NO_VERDICT, cache_key
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.evaluators.judge.usage import Usage
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord


class ClaimsInput(BaseModel):
    question: str
    answer: str


class Claims(BaseModel):
    claims: list[str] = Field(description="Atomic, self-contained factual claims of the answer.")


class Doc(BaseModel):
    index: int
    text: str


class Claim(BaseModel):
    index: int
    text: str


class VerdictsInput(BaseModel):
    documents: list[Doc]
    claims: list[Claim]


Label = Literal["supported", "contradicted", "not_found"]


class PairVerdict(BaseModel):
    claim_index: int
    document_index: int
    verdict: Label
    reason: str = Field(max_length=500)


class Verdicts(BaseModel):
    verdicts: list[PairVerdict]


class Verdict(BaseModel):
    """A claim's verdict over all documents, aggregated from its pair verdicts."""

    verdict: Label
    reason: str
    document_index: int | None = None


class WholeInput(BaseModel):
    question: str
    documents: list[Doc]
    answer: str


class WholeVerdict(BaseModel):
    verdict: Literal[0, 1]
    reasoning: str = Field(max_length=1000)


CLAIMS = Prompt(
    name="faithfulness.claims",
    version="2",
    instruction=(
        "Split the answer into atomic factual claims: short, self-contained statements "
        "(resolve pronouns), one fact each. Leave out greetings, hedges and questions. "
        "An answer that states no facts (a refusal, 'I don't know') has no claims."
    ),
    input_model=ClaimsInput,
    output_model=Claims,
)
VERDICTS = Prompt(
    name="faithfulness.verdicts",
    version="3",
    instruction=(
        "For every claim and every document, judge the claim against that document alone. "
        "'supported': the document states or directly implies it. 'contradicted': the "
        "document states otherwise. 'not_found': the document does not say. Use only the "
        "document, not your own knowledge. One verdict per (claim_index, document_index) "
        "pair, each with a one-sentence reason."
    ),
    input_model=VerdictsInput,
    output_model=Verdicts,
    shared=("documents",),
)
WHOLE = Prompt(
    name="faithfulness.whole",
    version="2",
    instruction=(
        "Is every factual statement of the answer supported by the documents? Verdict 1 if "
        "yes, 0 if any statement is contradicted by or absent from the documents. Use only "
        "the documents. Explain briefly."
    ),
    input_model=WholeInput,
    output_model=WholeVerdict,
    shared=("documents",),
)


def _docs(record: RagRecord) -> list[Doc]:
    return [Doc(index=i, text=d.content) for i, d in enumerate(record.documents)]


class JudgeFaithfulness(JudgeEvaluator):
    metric = "faithfulness"
    applies_to = ANSWERED
    method = "llm_judge"
    calls_per_record = 2

    class Options(PluginOptions):
        classify_by_statement: bool = Field(
            True,
            description="true: extract claims, verdict each (2 calls); false: one whole-answer "
            "verdict (1 call)",
        )

    options: Options

    def load(self, context: PluginContext) -> None:
        super().load(context)
        self.calls_per_record = 2 if self.options.classify_by_statement else 1

    async def _judge(self, record: RagRecord) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        if not record.answer.strip():
            return self.not_applicable("answer is empty")
        if not self.options.classify_by_statement:
            return await self._whole(record)
        assert self.client is not None
        usage = Usage()
        claims, used = await self.client.ask(
            CLAIMS, ClaimsInput(question=record.question, answer=record.answer)
        )
        usage.add(used)
        prompts = [CLAIMS.id]
        if not claims.claims:
            return self.judged(
                1.0,
                usage,
                prompts,
                label="no_claims",
                explanation="the answer makes no factual claims",
                claims=[],
            )
        verdicts = await self._verdicts(claims.claims, _docs(record), usage)
        prompts.append(VERDICTS.id)
        supported = sum(v.verdict == "supported" for v in verdicts)
        contradicted = sum(v.verdict == "contradicted" for v in verdicts)
        score = supported / len(verdicts)
        return self.judged(
            score,
            usage,
            prompts,
            label="faithful" if supported == len(verdicts) else "unfaithful",
            explanation=f"{supported} of {len(verdicts)} claims supported"
            + (f", {contradicted} contradicted" if contradicted else ""),
            claims=[
                {"claim": c, "verdict": v.verdict, "reason": v.reason, "document": v.document_index}
                for c, v in zip(claims.claims, verdicts, strict=True)
            ],
        )

    async def _verdicts(self, claims: list[str], docs: list[Doc], usage: Usage) -> list[Verdict]:
        """Pair verdicts from the cache, the unknown pairs in one call; aggregated per claim."""
        assert self.client is not None
        client = self.client

        def key(ci: int, di: int) -> str:
            inputs = {"claim": claims[ci], "document": docs[di].text}
            return cache_key(f"{VERDICTS.id}/pair", client.model, inputs)

        pairs: dict[tuple[int, int], PairVerdict] = {}
        silent: set[tuple[int, int]] = set()  # asked before; the judge gave no verdict
        for ci in range(len(claims)):
            for di in range(len(docs)):
                hit = client.cache.get(key(ci, di))
                if hit == NO_VERDICT:
                    silent.add((ci, di))
                elif hit is not None:
                    pairs[(ci, di)] = PairVerdict.model_validate_json(hit)
        if hits := len(pairs) + len(silent):
            client.metrics.cache.labels("hit").inc(hits)
            usage.add(Usage(cached=hits))
        every = {(ci, di) for ci in range(len(claims)) for di in range(len(docs))}
        todo = every - set(pairs) - silent
        if todo:
            claim_ids = sorted({ci for ci, _ in todo})
            doc_ids = sorted({di for _, di in todo})
            batch = VerdictsInput(
                documents=[docs[di] for di in doc_ids],
                claims=[Claim(index=ci, text=claims[ci]) for ci in claim_ids],
            )
            answer, used = await client.ask(VERDICTS, batch)
            usage.add(used)
            for v in answer.verdicts:
                if (v.claim_index, v.document_index) in todo:
                    pairs[(v.claim_index, v.document_index)] = v
                    client.cache.put(key(v.claim_index, v.document_index), v.model_dump_json())
            # The whole answer is kept: a pair the judge left out (a judge that answers
            # once per claim, say) is cached as no verdict, so a rerun does not ask again.
            for ci, di in todo - set(pairs):
                client.cache.put(key(ci, di), NO_VERDICT)
        return [
            _aggregate([pairs.get((ci, di)) for di in range(len(docs))])
            for ci in range(len(claims))
        ]

    async def _whole(self, record: RagRecord) -> EvalResult:
        assert self.client is not None
        verdict, usage = await self.client.ask(
            WHOLE,
            WholeInput(question=record.question, documents=_docs(record), answer=record.answer),
        )
        return self.judged(
            float(verdict.verdict),
            usage,
            [WHOLE.id],
            label="faithful" if verdict.verdict else "unfaithful",
            explanation=verdict.reasoning,
        )


def _aggregate(pair_verdicts: list[PairVerdict | None]) -> Verdict:
    """Supported by any document > contradicted by one > not found (missing = not found)."""
    known = [v for v in pair_verdicts if v is not None]
    for label in ("supported", "contradicted"):
        for v in known:
            if v.verdict == label:
                return Verdict(verdict=label, reason=v.reason, document_index=v.document_index)
    return Verdict(verdict="not_found", reason="no document states it")
