"""``consistency/rules``: does the answer state a number or a name for the same thing an
earlier answer of the conversation stated differently ("built in 1857", then "built in
1860")?

Precision first: a pair of sentences (one of the answer, one of an earlier assistant
message in the record's history) is compared only when both say the same thing in the
same words apart from their values. Per sentence:

- values: numbers (``1,857`` = ``1857``; ``12%``; ordinals) and names (runs of capitalised
  words, not the sentence's first word, not "I");
- frame: the other words, lower-cased, stop words and a few correction words ("actually",
  "sorry", "indeed", "correct") left out, a plural ``s`` folded.

Two sentences contradict when their frames are the same set of words, they carry as many
numbers and as many names, exactly one number (in order) has another value or one name (in
order) shares no word with its counterpart, and what they share (the frame's words and
the values that agree) counts at least ``min_frame_words``.
Anything else (a frame with a word more, a pronoun for the subject, a value more) is not
compared: such answers go unflagged rather than flagged wrongly. Nor is an answer sentence
when the user's question names something (a name, a number) that neither the conversation
so far nor that sentence mentions: "And the one in Bergen?" asks about another thing,
whose answer may rightly carry another value.

Score 1 (consistent) or 0 (contradiction: ``details.contradictions`` name the turn, the
sentences and the values); not applicable without an earlier answer in the history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED, Evaluator, Tier
from ragpulse.evaluators.text.analyses import STOP_WORDS, normalize, sentences
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import EvalResult, RagRecord

_TOKEN = re.compile(r"\d[\d,]*(?:\.\d+)?(?:st|nd|rd|th)?%?|[^\W\d_][\w'’-]*")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_NEUTRAL = frozenset(
    "actually really indeed sorry apologies apologize apologise correct correction mistake "
    "wrong fact earlier previously said mentioned stated yes no right exactly".split()
)
"""Words a restatement or a correction adds without changing what is stated."""
MAX_SENTENCES = 200
"""Sentences read of the answer and of the history each (a bound on the work)."""


@dataclass(frozen=True)
class _Sentence:
    text: str
    frame: frozenset[str]
    numbers: tuple[float, ...]
    names: tuple[tuple[str, frozenset[str]], ...]
    """Each name as written, and its words lower-cased."""
    turn: int | None


def _fold(word: str) -> str:
    word = word.lower().replace("’", "'")
    word = word.removesuffix("'s")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _read(text: str, turn: int | None) -> _Sentence:
    tokens = _TOKEN.findall(text)
    frame: set[str] = set()
    numbers: list[float] = []
    names: list[tuple[str, frozenset[str]]] = []
    run: list[str] = []
    for i, token in enumerate(tokens):
        capitalised = token[0].isupper() and i > 0 and normalize(token) not in STOP_WORDS
        if capitalised:
            run.append(token)
            continue
        if run:
            names.append((" ".join(run), frozenset(w.lower() for w in run)))
            run = []
        if token[0].isdigit():
            numbers.append(float(_NUMBER.match(token).group().replace(",", "")))  # type: ignore[union-attr]
            if token.endswith("%"):
                frame.add("%")
            continue
        word = _fold(token)
        if word not in STOP_WORDS and normalize(token) not in STOP_WORDS and word not in _NEUTRAL:
            frame.add(word)
    if run:
        names.append((" ".join(run), frozenset(w.lower() for w in run)))
    return _Sentence(text, frozenset(frame), tuple(numbers), tuple(names), turn)


def _mentions(text: str) -> set[str]:
    """Every word (lower-cased) and number (as :func:`_read` reads it) of ``text``."""
    return {
        f"{float(_NUMBER.match(t).group().replace(',', '')):g}" if t[0].isdigit()  # type: ignore[union-attr]
        else t.lower()
        for t in _TOKEN.findall(text)
    }  # fmt: skip


def _clash(now: _Sentence, earlier: _Sentence, minimum: int) -> tuple[str, str] | None:
    """The differing values (earlier, now) when the two sentences (of the same frame)
    contradict, else None: exactly one value differs (two that differ more likely speak of
    another thing: "The Royal Gardens is 201 metres tall", "The Victoria Bridge is 229
    metres tall"), and what they share (frame words, values that agree) counts at least
    ``minimum``."""
    if len(now.numbers) != len(earlier.numbers) or len(now.names) != len(earlier.names):
        return None
    shared, differ = len(now.frame), []
    for a, b in zip(earlier.numbers, now.numbers, strict=True):
        if a == b:
            shared += 1
        else:
            differ.append((f"{a:g}", f"{b:g}"))
    for (x, x_words), (y, y_words) in zip(earlier.names, now.names, strict=True):
        if x_words & y_words:  # "Gustave Eiffel" and "Eiffel" are one name
            shared += 1
        else:
            differ.append((x, y))
    return differ[0] if len(differ) == 1 and shared >= minimum else None


class Consistency(Evaluator):
    """1 when no sentence of the answer restates an earlier answer's sentence with another
    number or name, else 0."""

    metric = "consistency"
    method = "rules"
    tier = Tier.CHEAP
    applies_to = ANSWERED

    class Options(PluginOptions):
        min_frame_words: int = Field(
            2, ge=1, description="words (or agreeing values) two sentences share to be compared"
        )

    options: Options

    def score(self, record: RagRecord) -> EvalResult:
        earlier_answers = [m for m in record.history if m.role == "assistant" and m.content]
        if not earlier_answers:
            return self.not_applicable("no earlier answer in the conversation")
        if not record.answer.strip():
            return self.not_applicable("answer is empty")
        minimum = self.options.min_frame_words
        by_frame: dict[frozenset[str], list[_Sentence]] = {}
        read = 0
        for message in reversed(earlier_answers):  # the latest first: it is what was said last
            for text in sentences(message.content):
                if read >= MAX_SENTENCES:
                    break
                read += 1
                sentence = _read(text, message.turn)
                if sentence.frame and (sentence.numbers or sentence.names):
                    by_frame.setdefault(sentence.frame, []).append(sentence)
        # What the user's question names that the conversation never said (a place, a
        # number): the answer may be about that, not about what the earlier answer was
        # ("And the one in Bergen?"). A sentence that does not name it is not compared.
        asked = _read(record.question, record.turn)
        named = {w for _, words in asked.names for w in words}
        named |= {f"{n:g}" for n in asked.numbers}
        if named:
            named -= set().union(*(_mentions(m.content) for m in record.history))
        contradictions = []
        for text in sentences(record.answer)[:MAX_SENTENCES]:
            if named and named - _mentions(text):
                continue
            now = _read(text, record.turn)
            for earlier in by_frame.get(now.frame, ()):
                values = _clash(now, earlier, minimum)
                if values is not None:
                    contradictions.append(
                        {"turn": earlier.turn, "earlier": earlier.text, "now": now.text,
                         "earlier_value": values[0], "value": values[1]}
                    )  # fmt: skip
                    break
        if contradictions:
            first = contradictions[0]
            where = f"turn {first['turn']}" if first["turn"] is not None else "an earlier answer"
            return self.result(
                0.0,
                label="contradiction",
                explanation=f"{first['value']} where {where} said {first['earlier_value']}",
                contradictions=contradictions,
            )
        return self.result(1.0, label="consistent", compared_sentences=read)
