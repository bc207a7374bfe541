"""Refusal detection by rules: does the answer decline, or say it does not know?

A RAG app that answers "the provided context does not contain that" is often
right to do so, but a rising refusal rate is one of the first visible symptoms
of broken retrieval (empty or irrelevant documents) or an over-strict prompt,
so this runs on every trace.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from typing import Literal

from ragpulse.evaluators.base import ANSWERED, Evaluator, Tier
from ragpulse.evaluators.injection_engine.engine import PatternSet
from ragpulse.evaluators.injection_engine.vocabulary import LazyPattern
from ragpulse.evaluators.text.analyses import sentences
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Direction, EvalResult, RagRecord

Kind = Literal["decline", "dont_know"]

_QUOTES = (("’", "'"), ("‘", "'"), ("“", '"'), ("”", '"'), ("`", "'"))
_I = r"(?:i|we)"
_CANT = (
    r"(?:can't|cannot|can not|won't|will not|am unable to|'m unable to|are unable to|"
    r"am not able to|'m not able to|are not able to|'re not able to|am not allowed to|"
    r"'m not allowed to|am not permitted to|'m not permitted to|refuse to|"
    r"must (?:respectfully |politely )?decline to|have to decline to|do not feel comfortable|"
    r"don't feel comfortable|am not comfortable|'m not comfortable)"
)
_CONTEXT = (
    r"(?:context|contexts|documents?|information|text|passages?|sources?|articles?|excerpts?|"
    r"data|search results|materials?|records|knowledge base)"
)

# "I don't know" and "the context does not say": the app lacks the information.
# Compiled on first use (LazyPattern): Hyperscan lets a typical answer run none of them.
_DONT_KNOW: tuple[LazyPattern, ...] = tuple(
    LazyPattern(p)
    for p in (
        rf"\b{_I} (?:really |honestly |simply |just )?(?:don't|do not) know\b",
        rf"\b{_I} (?:have no|don't have any|do not have any) (?:idea|information|knowledge|"
        r"data|way of knowing|details|record)\b",
        rf"\b{_I} (?:don't|do not) have (?:enough |sufficient |the |that |this |specific |"
        r"access to |real-time |relevant |any relevant )?(?:information|data|details|"
        r"knowledge|context|access)\b",
        rf"\b{_I}(?:'m| am| are|'re) not (?:sure|certain|aware)\b(?!,? (?:but|if|whether|how|"
        r"why|what|when|where|which|who|that)\b)",
        rf"\b(?:the |this |these |provided |given |available |supplied |retrieved |above |"
        rf"following )+{_CONTEXT} (?:does not|do not|doesn't|don't|did not|didn't) "
        r"(?:seem to |appear to )?(?:contain|mention|include|provide|say|specify|state|"
        r"address|cover|discuss|give|offer|have|indicate|describe|explain|answer|reference|"
        r"tell|list|identify)\b",
        r"\b(?:there is|there's|there are|there was)\s(?:not enough|insufficient|no|limited|no "
        r"relevant|no specific)\s(?:information|data|details|context|mention)\b",
        r"\b(?:not enough|insufficient) (?:information|data|details|context|evidence)\b",
        r"\b(?:is|are|was|were|isn't|aren't|wasn't|weren't)\s(?:not\s)?(?:mentioned|specified|"
        r"provided|stated|given|included|available|covered|addressed|discussed|found|listed)\s"
        r"(?:in|within|by)\s(?:the|this|these|any of the|any)\s(?:provided |given |available |"
        rf"retrieved |above )?{_CONTEXT}\b",
        rf"\b{_I}\s?(?:couldn't|could not|was unable to|wasn't able to|were unable to|can't|cannot|"
        r"am unable to|'m unable to) (?:find|locate|determine|identify|confirm|verify|"
        r"ascertain)\b",
        r"\b(?:cannot|can't|can not|unable to|impossible to|not possible to|no way to) (?:be )?"
        r"(?:determined?|answer(?:ed)?|tell|say|know|confirm(?:ed)?)\b(?:\W+\w+){0,6}?\W+(?:from|"
        r"based on|with|given|using|in) (?:the|this|these|only the)?\s?(?:provided |given |"
        rf"available |retrieved )?{_CONTEXT}\b",
        rf"\b(?:based on|from|according to|given|in) (?:the |this |these )?(?:provided |given |"
        rf"available |retrieved )?{_CONTEXT},? (?:it is|it's|i am|i'm|we are|we're) "
        r"(?:not |un)(?:clear|possible|able|known)\b",
        rf"\bit(?: is|'s) (?:not |un)clear (?:from|based on|in) the {_CONTEXT}\b",
        r"\b(?:beyond|outside) (?:my|the scope of my) (?:knowledge|training)\b",
        r"\bno (?:relevant |specific )?information (?:is |was )?(?:available|provided|given|"
        r"found|about|on|regarding)\b",
        r"^(?:unknown|not known|n/?a|none|no answer|not available|not enough information|"
        r"insufficient information|no information|cannot be determined|unanswerable)[.!]?$",
        # Spanish, French, German, Italian, Portuguese
        r"\b(?:no lo sé|no sé|je ne sais pas|ich weiß (?:es )?nicht|non lo so|não sei)\b",
    )
)

# "I can't help with that": the app will not answer.
_DECLINE: tuple[LazyPattern, ...] = tuple(
    LazyPattern(p)
    for p in (
        rf"\b{_I}\s?{_CANT} (?:\w+ ){{0,2}}?(?:help|assist|provide|comply|answer|do|fulfil|"
        r"fulfill|share|discuss|give|generate|create|write|support|engage|participate|offer|"
        r"disclose|reveal|produce|continue|complete|process|respond|perform|make|talk|tell|"
        r"say|go|honou?r|accommodate|grant|recommend|advise|contribute)\b(?! but\b)",
        rf"\b{_I} (?:must|have to|need to|will have to) (?:respectfully |politely |kindly )?"
        r"decline\b",
        r"\bas an ai(?: language model| assistant| model| chatbot)?,? i (?:can't|cannot|can not|"
        r"don't|do not|am not|'m not|am unable|'m unable|won't|will not|must not|shouldn't|"
        r"should not)\b",
        r"\b(?:that|this)(?:'s| is) not something (?:i|we) (?:can|am able to|'m able to|"
        r"will|should)\b",
        r"\b(?:this|that|your) request (?:violates|goes against|is against|is not something)\b",
        r"\b(?:against|violates?) (?:my|our|openai's|the) (?:guidelines|policies|policy|"
        r"programming|principles|usage policies|content policy|terms)\b",
        rf"\b{_I} (?:can't|cannot|can not) (?:and|or) (?:won't|will not)\b",
        r"\b(?:lo siento|perdón),? (?:pero )?no (?:puedo|podemos)\b|\bje ne (?:peux|pourrai) pas\b"
        r"|\bich kann (?:ihnen |dir )?(?:dabei |damit )?nicht helfen\b|\bnon posso\b"
        r"|\bnão posso\b",
    )
)

# A first sentence that only apologises or hedges: the refusal may follow it.
_PREAMBLE = re.compile(
    r"^(?:i'm sorry|i am sorry|sorry|i apologi[sz]e|apologies|my apologies|unfortunately|"
    r"hmm+|well|thank you|thanks|good question|great question|interesting question)\b"
)
_PREAMBLE_CHARS = 30


def _normalize(text: str) -> str:
    return _fold(unicodedata.normalize("NFKC", text))


def _fold(nfkc: str) -> str:
    """An NFKC text casefolded, quotes straightened, whitespace collapsed."""
    text = nfkc.casefold()
    for fancy, plain in _QUOTES:
        text = text.replace(fancy, plain)
    return " ".join(text.split())


_PATTERNS: tuple[tuple[Kind, LazyPattern], ...] = (
    *(("dont_know", p) for p in _DONT_KNOW),
    *(("decline", p) for p in _DECLINE),
)


@functools.cache
def _pattern_set() -> PatternSet:
    """The patterns on Hyperscan, compiled once per process (or loaded from an earlier
    process's on-disk copy): one scan of an answer says which may match one of its
    sentences, so a typical answer runs none of the 24 regexes."""
    return PatternSet("refusal", [p for _, p in _PATTERNS], anchored=False)


def _possible(answer: str) -> tuple[int, ...]:
    """Indices of the patterns that may match a sentence of ``answer``, in order."""
    return tuple(sorted(_pattern_set().possible(answer)))


def _first_match(sentence: str, possible: Sequence[int] | None = None) -> tuple[Kind, str] | None:
    """The refusal phrase in one sentence: "don't know" wins over "decline".

    ``possible``: the patterns worth running (:func:`_possible` of a text that holds the
    sentence), in order; None runs all.
    """
    for i in range(len(_PATTERNS)) if possible is None else possible:
        kind, pattern = _PATTERNS[i]
        for m in pattern.finditer(sentence):
            # Quoted phrases are content ('the song "I Don't Know"'), not refusals.
            if m.start() > 0 and sentence[m.start() - 1] in "\"'":
                continue
            return kind, m.group()
    return None


class RefusalRules(Evaluator):
    """Does the answer decline or say it does not know?

    A detection score, like injection: ``score`` is how strongly the answer
    refuses, 1.0 when the answer leads with a refusal or "don't know" and 0.0
    otherwise; higher is *not* better. ``label`` is ``refusal`` or
    ``answered``; ``details.kind`` separates ``decline`` ("I can't help with
    that") from ``dont_know`` ("the provided context does not contain ...").
    A refusal phrase later in an otherwise substantive answer ("X is Y; the
    documents do not say when") is a hedge, not a refusal: it stays
    ``answered`` with ``details.hedge`` set.
    """

    metric = "refusal"
    applies_to = ANSWERED
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER

    def load(self, context: PluginContext) -> None:
        super().load(context)
        _pattern_set()  # once per process, not during the first record

    def score(self, record: RagRecord) -> EvalResult:
        answer = _fold(self.texts.view(record.answer).nfkc)
        if not answer:
            return self.not_applicable("the answer is empty")
        possible = _possible(answer)
        if not possible:
            return self.result(0.0, label="answered", explanation="no refusal phrase", kind=None)
        parts = sentences(answer) or [answer]
        lead = 1
        if len(parts) > 1 and (len(parts[0]) <= _PREAMBLE_CHARS or _PREAMBLE.match(parts[0])):
            lead = 2  # "I'm sorry. I can't help with that."
        for i, sentence in enumerate(parts):
            found = _first_match(sentence, possible)
            if found is None:
                continue
            kind, phrase = found
            if i < lead:
                return self.result(
                    1.0,
                    label="refusal",
                    explanation=f"the answer {_VERB[kind]}: {phrase!r}",
                    kind=kind,
                    phrase=phrase,
                    sentence_index=i,
                )
            return self.result(
                0.0,
                label="answered",
                explanation=f"answered, with a hedge in sentence {i + 1}: {phrase!r}",
                kind=None,
                hedge={"kind": kind, "phrase": phrase, "sentence_index": i},
            )
        return self.result(0.0, label="answered", explanation="no refusal phrase", kind=None)


_VERB: dict[str, str] = {"decline": "declines", "dont_know": "says it does not know"}
