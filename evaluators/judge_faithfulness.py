"""``faithfulness/llm_judge``: is every claim of the answer supported by the documents?

By statement (default): call 1 extracts atomic claims from the answer; call 2
gives each claim a verdict against the documents (supported, contradicted,
not_found) with a reason and the supporting document. Score = supported /
claims; an answer without claims scores 1 and says so. Verdicts are cached per
(claim, documents), so only claims never judged against these documents are
sent, all in one call: at most two calls per record, often fewer. Whole-answer mode
(``classify_by_statement=false``): one call, verdict 1 or 0 with reasoning.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragpulse.config import JudgeSettings
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.cache import cache_key
from ragpulse.evaluators.judge.client import Usage
from ragpulse.evaluators.judge.prompts import Prompt
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


class Verdict(BaseModel):
    claim_index: int
    verdict: Literal["supported", "contradicted", "not_found"]
    reason: str = Field(max_length=500)
    document_index: int | None = None


class Verdicts(BaseModel):
    verdicts: list[Verdict]


class WholeInput(BaseModel):
    question: str
    documents: list[Doc]
    answer: str


class WholeVerdict(BaseModel):
    verdict: Literal[0, 1]
    reasoning: str = Field(max_length=1000)


CLAIMS = Prompt(
    name="faithfulness.claims",
    version="1",
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
    version="1",
    instruction=(
        "Judge each claim against the documents. 'supported': the documents state or directly "
        "imply it. 'contradicted': the documents state otherwise. 'not_found': the documents "
        "do not say. Use only the documents, not your own knowledge. One verdict per claim, "
        "with its claim_index, a one-sentence reason and the index of the document that "
        "decides it (null if none)."
    ),
    input_model=VerdictsInput,
    output_model=Verdicts,
)
WHOLE = Prompt(
    name="faithfulness.whole",
    version="1",
    instruction=(
        "Is every factual statement of the answer supported by the documents? Verdict 1 if "
        "yes, 0 if any statement is contradicted by or absent from the documents. Use only "
        "the documents. Explain briefly."
    ),
    input_model=WholeInput,
    output_model=WholeVerdict,
)


def _docs(record: RagRecord) -> list[Doc]:
    return [Doc(index=i, text=d.content) for i, d in enumerate(record.documents)]


class JudgeFaithfulness(JudgeEvaluator):
    metric = "faithfulness"
    method = "llm_judge"
    calls_per_record = 2

    def __init__(
        self, judge: JudgeSettings | None = None, classify_by_statement: bool = True
    ) -> None:
        super().__init__(judge)
        self.by_statement = classify_by_statement
        self.calls_per_record = 2 if classify_by_statement else 1

    async def _judge(self, record: RagRecord) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        if not record.answer.strip():
            return self.not_applicable("answer is empty")
        if not self.by_statement:
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
        """Verdicts for ``claims``: cached ones per (claim, documents), the rest in one call."""
        assert self.client is not None
        client, dumped = self.client, [d.model_dump() for d in docs]
        keys = [
            cache_key(f"{VERDICTS.id}/claim", client.model, {"documents": dumped, "claim": c})
            for c in claims
        ]
        found: dict[int, Verdict] = {}
        for i, key in enumerate(keys):
            hit = client.cache.get(key)
            if hit is not None:
                found[i] = Verdict.model_validate_json(hit)
                client.metrics.cache.labels("hit").inc()
                usage.add(Usage(cached=1))
        todo = [i for i in range(len(claims)) if i not in found]
        if todo:
            batch = VerdictsInput(
                documents=docs, claims=[Claim(index=j, text=claims[i]) for j, i in enumerate(todo)]
            )
            answer, used = await client.ask(VERDICTS, batch)
            usage.add(used)
            by_index = {v.claim_index: v for v in answer.verdicts}
            for j, i in enumerate(todo):
                verdict = by_index.get(j) or Verdict(
                    claim_index=j, verdict="not_found", reason="the judge gave no verdict"
                )
                found[i] = verdict.model_copy(update={"claim_index": i})
                client.cache.put(keys[i], found[i].model_dump_json())
        return [found[i] for i in range(len(claims))]

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
