"""The bare reference for `ragpulse eval` speed: K-Precision with a regex and a set.

Reads {question, contexts, answer} JSONL, writes each row back with its score,
nothing else: no package imports, no validation, no progress bar. The
`eval_speed.py` bench runs it beside `ragpulse eval` over the same file.

    python bench/kprecision_bare.py IN.jsonl OUT.jsonl
"""

import json
import re
import sys

TOKEN = re.compile(r"\w+")
STOP = frozenset(
    "a an the of to in and or is are was were be it that this for on with as by at".split()
)


def tokens(text: str) -> list[str]:
    return [t for t in TOKEN.findall(text.lower()) if t not in STOP]


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            answer = tokens(row.get("answer") or "")
            vocabulary = set()
            for context in row.get("contexts") or []:
                vocabulary.update(tokens(context))
            score = sum(t in vocabulary for t in answer) / len(answer) if answer else None
            row["kprecision"] = score
            out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
