"""``consistency/rules`` on synthetic answer pairs: precision, recall, and what it misses.

Each pair is an earlier answer (turn 1) and a follow-up's answer (turn 2) built from one
fact: a subject (40 places and things), a relation (built in a year, designed by a
person, has a number of residents, is a height in metres, is in a country), and a value.
A pair is labelled 1 (contradiction) when the follow-up states the same relation of the
same subject with another value, 0 otherwise. The classes (every class over every fact,
its templates drawn with a fixed seed) were written down before the rule was run on them:

contradictions (1)
  same_words        the earlier sentence again with another value
  correction        "Sorry, I was wrong: " + the same sentence with another value
  reordered         the same statement in another order ("In 1860, the X was built.")
  pronoun           "It was built in 1860." (the subject only in the earlier turn)
  other_verb        another verb for the same relation ("completed in", "created by")
  extra_clause      the same sentence with another value and a clause more
consistent (0)
  repeat            the same sentence, the same value (and 5,000 / 5000)
  other_subject     the same relation of another subject, another value
  other_relation    another relation of the same subject
  changed_scope     a qualifier changes what is meant ("The old X", "renovated in")
  unit              the same height in feet
  question_scope    the same sentence, another value, for another subject that only the
                    user's follow-up question names ("And the one in Bergen?")

    .venv/bin/python bench/consistency_pairs.py [--seed 7]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ragpulse.evaluators.consistency.rules import Consistency
from ragpulse.record import HistoryMessage, RagRecord

SUBJECTS = [
    "Harbour lighthouse", "Old Mill bridge", "North Station", "city library", "Grand Theatre",
    "river dam", "town hall", "Queen's hospital", "central market", "West pier",
    "stone cathedral", "Museum of Maps", "Kings Road tunnel", "observatory", "Royal Gardens",
    "cable car", "main stadium", "fish market", "clock tower", "Castle Hill fort",
    "Botanic Garden", "Union Bank building", "harbour crane", "Eastgate mall",
    "Saint Anne's school", "water tower", "Victoria Bridge", "art gallery", "opera house",
    "ferry terminal", "Maple Street church", "ice rink", "Central Park zoo", "windmill",
    "Lakeside hotel", "Pioneer monument", "tram depot", "Hill Street prison",
    "Merchant Hall", "city aquarium",
]  # fmt: skip
PEOPLE = ["Gustave Eiffel", "Ada Lindqvist", "Thomas Telford", "Maria Okafor", "Jonas Berg",
          "Ines Duarte", "Kenji Mori", "Clara Hoffmann", "Samuel Adeyemi", "Lucia Romano"]  # fmt: skip
COUNTRIES = ["Norway", "Portugal", "Canada", "Kenya", "Japan", "Chile", "Austria", "Ireland"]
TOWNS = ["Bergen", "Porto", "Halifax", "Mombasa", "Sapporo", "Valparaiso", "Graz", "Cork"]


@dataclass(frozen=True)
class Relation:
    name: str
    sentence: Callable[[str, str], str]  # (subject, value) -> the statement
    other_verb: Callable[[str, str], str]
    reordered: Callable[[str, str], str]
    pronoun: Callable[[str], str]
    value: Callable[[random.Random], str]


RELATIONS = [
    Relation("year", lambda s, v: f"The {s} was built in {v}.",
             lambda s, v: f"The {s} was completed in {v}.",
             lambda s, v: f"In {v}, the {s} was built.",
             lambda v: f"It was built in {v}.",
             lambda r: str(r.randint(1700, 2015))),
    Relation("designer", lambda s, v: f"The {s} was designed by {v}.",
             lambda s, v: f"The {s} was created by {v}.",
             lambda s, v: f"It was {v} who designed the {s}.",
             lambda v: f"It was designed by {v}.",
             lambda r: r.choice(PEOPLE)),
    Relation("residents", lambda s, v: f"The {s} district has {v} residents.",
             lambda s, v: f"About {v} people live in the {s} district.",
             lambda s, v: f"Some {v} residents live in the {s} district.",
             lambda v: f"It has {v} residents.",
             lambda r: f"{r.randint(2, 90) * 1000:,}"),
    Relation("height", lambda s, v: f"The {s} is {v} metres tall.",
             lambda s, v: f"The {s} rises {v} metres.",
             lambda s, v: f"{v} metres: that is how tall the {s} is.",
             lambda v: f"It is {v} metres tall.",
             lambda r: str(r.randint(12, 300))),
    Relation("country", lambda s, v: f"The {s} is in {v}.",
             lambda s, v: f"The {s} is located in {v}.",
             lambda s, v: f"In {v} you will find the {s}.",
             lambda v: f"It is in {v}.",
             lambda r: r.choice(COUNTRIES)),
]  # fmt: skip


@dataclass(frozen=True)
class Pair:
    kind: str
    label: int
    earlier: str
    answer: str
    question: str = "Tell me more."


def _other(value: str, draw: Callable[[random.Random], str], rng: random.Random) -> str:
    while (new := draw(rng)) == value:
        pass
    return new


def pairs(seed: int) -> Iterator[Pair]:
    rng = random.Random(seed)
    for subject in SUBJECTS:
        for rel in RELATIONS:
            value = rel.value(rng)
            new = _other(value, rel.value, rng)
            earlier = rel.sentence(subject, value)
            changed = rel.sentence(subject, new)
            yield Pair("same_words", 1, earlier, changed)
            yield Pair("correction", 1, earlier, f"Sorry, I was wrong: {changed}")
            yield Pair("reordered", 1, earlier, rel.reordered(subject, new))
            yield Pair("pronoun", 1, earlier, rel.pronoun(new))
            yield Pair("other_verb", 1, earlier, rel.other_verb(subject, new))
            yield Pair("extra_clause", 1, earlier,
                       f"{changed.rstrip('.')}, and it is open to visitors.")  # fmt: skip
            same = rel.sentence(subject, value.replace(",", "")) if rel.name == "residents" \
                else earlier  # fmt: skip
            yield Pair("repeat", 0, earlier, same)
            other = rng.choice([s for s in SUBJECTS if s != subject])
            yield Pair("other_subject", 0, earlier, rel.sentence(other, new))
            rel2 = rng.choice([r for r in RELATIONS if r is not rel])
            yield Pair("other_relation", 0, earlier, rel2.sentence(subject, rel2.value(rng)))
            yield Pair("changed_scope", 0, earlier, f"The old {changed[4:]}")
            if rel.name == "height":
                feet = round(int(value) * 3.281)
                yield Pair("unit", 0, earlier, f"The {subject} is {feet} feet tall.")
            town = rng.choice(TOWNS)
            yield Pair("question_scope", 0, earlier, changed, f"And the one in {town}?")


def record(pair: Pair) -> RagRecord:
    history = [
        HistoryMessage(role="user", content="Tell me about it.", turn=1),
        HistoryMessage(role="assistant", content=pair.earlier, turn=1),
    ]
    return RagRecord(trace_id="1" * 32, question=pair.question, answer=pair.answer,
                     history=history, turn=2)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    built = list(pairs(args.seed))
    results = Consistency().evaluate([record(p) for p in built])
    flagged = Counter[str]()
    total = Counter[str]()
    tp = fp = fn = tn = 0
    for pair, result in zip(built, results, strict=True):
        hit = result.label == "contradiction"
        total[pair.kind] += 1
        flagged[pair.kind] += hit
        tp += hit and pair.label == 1
        fp += hit and pair.label == 0
        fn += not hit and pair.label == 1
        tn += not hit and pair.label == 0
    print(f"{len(built)} pairs ({tp + fn} contradictions), seed {args.seed}")
    print(f"{'class':16} {'label':>5} {'pairs':>5} {'flagged':>8}")
    for kind in total:
        label = next(p.label for p in built if p.kind == kind)
        print(f"{kind:16} {label:>5} {total[kind]:>5} {flagged[kind] / total[kind]:>8.2f}")
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn)
    balanced = (recall + tn / (tn + fp)) / 2
    print(f"precision {precision:.3f}  recall {recall:.3f}  balanced accuracy {balanced:.3f}"
          f"  (AUROC of a 0/1 score = balanced accuracy)")  # fmt: skip


if __name__ == "__main__":
    main()
