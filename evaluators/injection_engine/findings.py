"""Where an injection detector found something, in the one shape every detector reports.

A location is ``question`` or ``document:<i>`` (``i``: the 0-based position in
``record.documents``). Each finding also carries the document's ``document_id``
(None for the question or for a document the app gave no id), because the
position only says which of this record's documents; the id says which document
of the corpus to find and remove. A document an agent's tool call returned also names
that call (``source``: ``tool search_docs #2``, its ``call_id`` and ``span_id``), so that
an injection arriving through a tool points at the call that fetched it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragpulse.evaluators.base import Evaluator
from ragpulse.record import DocumentSource, EvalResult, RagRecord


def locations(record: RagRecord) -> list[tuple[str, str]]:
    """(where, text) for the question and each document, as ``injection/rules`` reports them.

    ``where`` is ``question`` or ``document:<i>``, ``i`` the 0-based position in
    ``record.documents``; :func:`document_ids` gives each position's document id.
    """
    out = [("question", record.question)] if record.question.strip() else []
    out += [
        (f"document:{i}", d.content)
        for i, d in enumerate(record.documents)
        if d.content.strip() and not d.carried  # an earlier turn's: scanned in that turn
    ]
    return out


def document_ids(record: RagRecord) -> dict[str, str | None]:
    """``document:<i>`` -> that document's id (None when the app gave none)."""
    return {f"document:{i}": d.id for i, d in enumerate(record.documents)}


def document_sources(record: RagRecord) -> dict[str, DocumentSource]:
    """``document:<i>`` -> the tool call it came from (agent turns only)."""
    return {
        f"document:{i}": d.source for i, d in enumerate(record.documents) if d.source is not None
    }


def place(where: str, document_id: str | None, source: DocumentSource | None = None) -> str:
    """A location as explanations name it: ``document:2 (id kb-17)``, ``document:2 (tool
    search_docs #1, id kb-17)``, or ``where`` alone.

    The position says which of the record's documents, the id which document of the
    corpus (an operator needs it to find and remove a poisoned document), the source
    which tool call fetched it.
    """
    named = [source.label] if source is not None else []
    if document_id is not None:
        named.append(f"id {document_id}")
    return f"{where} ({', '.join(named)})" if named else where


def finding(
    where: str,
    ids: Mapping[str, str | None],
    sources: Mapping[str, DocumentSource] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One entry of ``details.findings``: ``where``, ``document_id`` (None for the question
    and for a document without an id), the tool call a document came from (``source``,
    ``call_id``, ``span_id``: agent turns), then the detector's own fields."""
    found: dict[str, Any] = {"where": where, "document_id": ids.get(where)}
    source = sources.get(where) if sources else None
    if source is not None:
        found.update(source=source.label, call_id=source.call_id, span_id=source.span_id)
    return {**found, **fields}


def findings_result(
    evaluator: Evaluator,
    risks: list[tuple[str, float]],
    threshold: float,
    record: RagRecord | None = None,
    **details: Any,
) -> EvalResult:
    """The result shared by model-based injection detectors: max risk over locations.

    With ``record``, each finding and the explanation also name the document's id.
    """
    if not risks:
        return evaluator.not_applicable("no question or document text")
    ids = document_ids(record) if record is not None else {}
    sources = document_sources(record) if record is not None else {}
    where, top = max(risks, key=lambda x: x[1])
    hits = [(w, r) for w, r in risks if r >= threshold]
    flagged = [
        finding(w, ids, sources, risk=round(r, 4))
        if record is not None
        else {"where": w, "risk": round(r, 4)}
        for w, r in hits
    ]
    label = "injection" if top >= threshold else "benign"
    highest = place(where, ids.get(where), sources.get(where))
    explanation = (
        f"{', '.join(place(w, ids.get(w), sources.get(w)) for w, _ in hits)} classified as "
        f"injection (risk {top:.2f})"
        if flagged
        else f"no location above {threshold} (highest {highest}: {top:.2f})"
    )
    return evaluator.result(
        top,
        label=label,
        explanation=explanation,
        findings=flagged,
        per_location={w: round(r, 4) for w, r in risks},
        threshold=threshold,
        **details,
    )
