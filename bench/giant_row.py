"""``ragpulse eval`` on one giant row between two small ones: peak RSS and wall time.

The input is a JSONL file of three rows; the middle one carries a ~50 MB
retrieved document (``--mb``). Each configuration runs ``ragpulse eval`` as a
subprocess (the child reports its own peak RSS, ``VmHWM``, as it exits: Linux);
it is also run on the two small rows alone, so the figure the giant row adds is
visible. Every run must write all three rows and say, on the giant one, what was
cut (``truncated_input``).

    .venv/bin/python bench/giant_row.py [--mb 50] [--skip-models]

Configurations: the default metrics (today the cheap tier), the cheap tier
named explicitly, and the model tier's MiniLM evaluators (when the ``models``
extra is installed). The texts past ``evaluation.max_text_chars`` (200,000
characters by default) are cut before any evaluator sees them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHEAP = "faithfulness/lexical,context_relevance/lexical,answer_relevance/lexical,injection/rules,refusal/rules"
MODELS = (
    "faithfulness/probe,injection/probe,context_relevance/embedding,"
    "answer_relevance/embedding,faithfulness/embedding"
)
SMALL = [
    {
        "question": "What is the refund policy?",
        "contexts": ["Returns are accepted within 30 days of purchase with a receipt."],
        "answer": "You can return items within 30 days with a receipt.",
    },
    {
        "question": "Who pays return shipping?",
        "contexts": ["The customer pays return shipping unless the item arrived damaged."],
        "answer": "The customer, unless the item arrived damaged.",
    },
]
_WORDS = (
    "the refund policy allows returns within thirty days of purchase provided the receipt "
    "and original packaging are kept customer service can issue store credit or an exchange "
    "warranty claims for a battery screen laptop or phone go through the support team"
).split()


def giant_text(chars: int, seed: int = 0) -> str:
    """About ``chars`` characters of sentence-like text (a paragraph repeated)."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(40):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
        sentences.append(" ".join(words).capitalize() + ".")
    paragraph = " ".join(sentences) + "\n"
    return (paragraph * (chars // len(paragraph) + 1))[:chars]


def write_giant_input(path: Path, mb: float = 50.0) -> None:
    """Small row, a row whose one document is ``mb`` MB of text, small row."""
    big = {
        "question": "How long do I have to return a laptop?",
        "contexts": [giant_text(int(mb * 1_000_000))],
        "answer": "Laptops can be returned within thirty days with the receipt.",
    }
    with path.open("w", encoding="utf-8") as f:
        for row in (SMALL[0], big, SMALL[1]):
            f.write(json.dumps(row) + "\n")


# The child reports its own peak (VmHWM of its process image) on exit. The rusage of
# wait4 would not do: subprocess starts children with vfork, and Linux carries the
# parent's high-water mark (this script's, or a test run's) into the child's ru_maxrss.
_CHILD = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    sys.stderr.write(f"\\nragpulse-peak-rss-kb {kb}\\n")
atexit.register(_peak)
from ragpulse.cli import main
sys.exit(main(["eval", *sys.argv[1:]]))
"""


def run_eval(args: list[str], log: Path) -> tuple[int, float, float]:
    """(exit status, peak RSS in MiB, wall seconds) of one ``ragpulse eval`` child (Linux)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(
            [sys.executable, "-c", _CHILD, *args], stdout=out, stderr=subprocess.STDOUT, env=env
        ).returncode
    wall = time.perf_counter() - start
    peaks = [line for line in log.read_text().splitlines() if "ragpulse-peak-rss-kb" in line]
    return code, int(peaks[-1].split()[-1]) / 1024 if peaks else float("nan"), wall


def check_output(path: Path, rows: int) -> str:
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == rows, f"{len(lines)} rows written, expected {rows}"
    assert all(line.get("results") for line in lines), "a row without results"
    if rows == 3:
        cut = lines[1].get("truncated_input")
        assert cut, "the giant row does not say what was cut"
        return ", ".join(f"{c['field']} {c['chars']:,} -> {c['evaluated_chars']:,}" for c in cut)
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="size of the giant document")
    parser.add_argument("--skip-models", action="store_true", help="cheap tier only")
    opts = parser.parse_args()

    configs = [("default metrics", []), ("cheap tier (named)", ["--metrics", CHEAP])]
    if not opts.skip_models:
        try:
            import sentence_transformers  # noqa: F401
        except ImportError:
            print("models extra not installed: model tier skipped")
        else:
            configs.append(("model tier (MiniLM evaluators)", ["--metrics", MODELS]))

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        giant, small = folder / "giant.jsonl", folder / "small.jsonl"
        write_giant_input(giant, opts.mb)
        small.write_text("".join(json.dumps(r) + "\n" for r in SMALL), encoding="utf-8")
        print(f"input: {giant.stat().st_size / 1e6:.1f} MB, 3 rows (one {opts.mb:g} MB document)")
        print(f"{'configuration':34} {'input':12} {'exit':>4} {'peak RSS':>10} {'wall':>8}  cut")
        for name, extra in configs:
            for label, source, rows in (("2 small rows", small, 2), ("giant + 2", giant, 3)):
                out = folder / "out.jsonl"
                code, rss, wall = run_eval(
                    [str(source), "-o", str(out), *extra], folder / "log.txt"
                )
                if code != 0:
                    print((folder / "log.txt").read_text()[-3000:])
                    raise SystemExit(f"{name} on {label}: exit {code}")
                cut = check_output(out, rows)
                print(f"{name:34} {label:12} {code:>4} {rss:>7.0f} MiB {wall:>7.1f}s  {cut}")


if __name__ == "__main__":
    main()
