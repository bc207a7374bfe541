"""A small instrumented RAG app for the demo (and as an example of the decorators).

Keyword retrieval over a tiny corpus shipped with the package, and an
extractive answerer that copies the best-matching sentence. To give the
evaluators something to find, a share of answers is deliberately ungrounded,
two documents carry prompt injections, and one question is an injection.

``python -m ragpulse.cli.demo_app`` sends questions until stopped, exporting to
``RAGPULSE_ENDPOINT`` (the compose stack's demo app).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import sys
import time
import zlib
from functools import lru_cache
from importlib.resources import files
from typing import Any

import ragpulse
from ragpulse.evaluators.text.analyses import content_token_set, sentences

MODEL = "extractive-demo-v1"


@lru_cache(maxsize=1)
def corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        files("ragpulse").joinpath("demo_data/corpus.json").read_text(encoding="utf-8")
    )
    return data


def _overlap(question: str, text: str) -> int:
    return len(content_token_set(question) & content_token_set(text))


def search(query: str, k: int = 3) -> list[dict[str, Any]]:
    """Keyword search over the help center: the ``k`` documents sharing most words with
    ``query`` (none that shares no word)."""
    ranked = sorted(
        corpus()["documents"], key=lambda d: _overlap(query, d["content"]), reverse=True
    )
    hits = [d for d in ranked[:k] if _overlap(query, d["content"]) > 0]
    return [
        {"id": d["id"], "content": d["content"], "score": float(_overlap(query, d["content"]))}
        for d in hits
    ]


@ragpulse.retrieval(data_source="nimbus-help-center")
def retrieve(query: str, k: int = 3) -> list[dict[str, Any]]:
    return search(query, k)


# The one planted instruction the demo falls for (``ragpulse eval --generator``'s
# ``injected`` condition plants it among others): a sentence asking for a code word is
# quoted whatever the question, as a naive extractive model would.
_CODE_WORD = re.compile(r"\breply with the code word\b", re.IGNORECASE)


@ragpulse.generation(model=MODEL, system="ragpulse-demo")
def generate(question: str, documents: list[dict[str, Any]], ungrounded: bool = False) -> str:
    if ungrounded:
        return str(random.choice(corpus()["ungrounded_answers"]))
    return extract(question, [d["content"] for d in documents])


def extract(question: str, texts: list[str]) -> str:
    """The extractive answer: the sentence of ``texts`` closest to ``question`` (or the
    planted code-word sentence, which this naive model always quotes)."""
    candidates = [s for text in texts for s in sentences(text)]
    followed = next((s for s in candidates if _CODE_WORD.search(s)), None)
    if followed is not None:
        return re.sub(r"\s+", " ", followed).strip()
    best = str(max(candidates, key=lambda s: _overlap(question, s), default=""))
    if _overlap(question, best) < 2:  # nothing close enough to quote
        return "I'm sorry, I don't know: the help center has nothing about that."
    return re.sub(r"\s+", " ", best).strip()


@ragpulse.pipeline(route="/ask")
def answer(question: str, ungrounded_rate: float = 0.25) -> str:
    documents = retrieve(question)
    return generate(question, documents, ungrounded=random.random() < ungrounded_rate)


def generate_for(question: str, documents: list[Any]) -> str:
    """The demo's generator as ``ragpulse eval --generator ragpulse.cli.demo_app:generate_for``
    calls it: documents as strings or ``{id, content}``. Its weakness, an invented answer
    for about one question in four, is decided by the question (not by chance) so that a
    run is repeatable."""
    docs = [d if isinstance(d, dict) else {"content": str(d)} for d in documents]
    ungrounded = zlib.crc32(question.encode("utf-8")) % 4 == 0
    if ungrounded:
        pool = corpus()["ungrounded_answers"]
        return str(pool[zlib.crc32(question.encode("utf-8")) // 4 % len(pool)])
    return str(generate(question, docs))


def main(argv: list[str] | None = None) -> int:
    """Ask the demo app questions at ``--rate`` per second, forever or ``--count`` times."""
    parser = argparse.ArgumentParser(
        prog="python -m ragpulse.cli.demo_app", description=main.__doc__
    )
    parser.add_argument("--rate", type=float, default=2.0, help="questions per second (2)")
    parser.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    args = parser.parse_args(argv)
    # Endpoint and service name come from RAGPULSE_ENDPOINT / RAGPULSE_SERVICE_NAME.
    ragpulse.configure()
    # SIGTERM (docker stop) unwinds through `finally`, which flushes the last spans.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    questions = corpus()["questions"]
    sent = 0
    try:
        while args.count <= 0 or sent < args.count:
            try:
                answer(random.choice(questions)["question"])
            except Exception:  # a demo that keeps sending beats one that stops
                pass
            sent += 1
            time.sleep(1.0 / args.rate)
    except KeyboardInterrupt:
        pass
    finally:
        ragpulse.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
