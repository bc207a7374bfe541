"""Prompt-injection detection by rules over the question and every retrieved document.

Each rule has a family and a weight; a location's risk is ``1 - prod(1 - w)``
over the rules that fired there and the record's score is the highest location
risk. The score is the detected *risk* (higher = worse), unlike the quality
metrics. The rules, the normaliser and the Hyperscan-backed engine live in
:mod:`ragpulse.evaluators.injection_engine`; this module is the evaluator.
"""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.injection_engine import TextScan
from ragpulse.evaluators.injection_engine.findings import (
    document_ids,
    document_sources,
    finding,
    place,
)
from ragpulse.evaluators.injection_engine.scan import (
    DOCUMENT_SCAN,
    QUESTION_SCAN,
    prepare,
    scan_document,
    scan_question,
)
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord


class InjectionRules(Evaluator):
    """Prompt-injection risk from rule families over the question and every document.

    The score is the detected risk in [0, 1] (higher = more likely an attack,
    unlike the quality metrics): the highest per-location risk, where a
    location's risk is ``1 - prod(1 - w)`` over the weights of the rules that
    fired there. ``details.findings`` says where (``question`` or
    ``document:<i>``, the 0-based position), the document's ``document_id``
    (None for the question or a document without one) and which rules fired,
    so an alert can point at the poisoned document.
    """

    metric = "injection"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER

    class Options(PluginOptions):
        threshold: float = Field(
            0.5, gt=0, le=1, description="risk at which the label is 'injection'; in (0, 1]"
        )

    options: Options

    def load(self, context: PluginContext) -> None:
        super().load(context)
        prepare()  # the rule databases, once per process: not during the first record

    def score(self, record: RagRecord) -> EvalResult:
        if not record.question and not record.documents:
            return self.not_applicable("no question and no documents to scan")
        # Each text is scanned once while it keeps coming back (documents are retrieved
        # again and again): the scan is kept with the text's shared analysis.
        view = self.texts.view
        locations: list[tuple[str, TextScan]] = []
        if record.question:
            scan = view(record.question).derived(QUESTION_SCAN, scan_question)
            locations.append(("question", scan))
        for i, doc in enumerate(record.documents):
            if doc.carried:  # an earlier turn's, or the system prompt: not scanned again
                continue
            scan = view(doc.content).derived(DOCUMENT_SCAN, scan_document)
            locations.append((f"document:{i}", scan))
        ids = document_ids(record)
        sources = document_sources(record)
        findings: list[dict[str, object]] = [
            finding(
                where,
                ids,
                sources,
                rules=list(scan.rules),
                families=list(scan.families),
                risk=scan.risk,
                excerpt=scan.excerpt,
            )
            for where, scan in locations
            if scan.fired
        ]
        worst_where, worst = max(locations, key=lambda loc: loc[1].risk)
        score = worst.risk
        if worst.fired:
            explanation = (
                f"{place(worst_where, ids.get(worst_where), sources.get(worst_where))} matched "
                f"{', '.join(worst.families)} (risk {score:.2f})"
            )
            if len(findings) > 1:
                explanation += f"; {len(findings) - 1} more location(s) with findings"
        else:
            explanation = f"no injection pattern in {len(locations)} location(s)"
        return self.result(
            score,
            label="injection" if score >= self.options.threshold else "benign",
            explanation=explanation,
            findings=findings,
            threshold=self.options.threshold,
        )
