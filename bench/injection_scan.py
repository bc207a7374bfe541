"""Cheap-tier injection scan time: a 2 MB document and the hostile inputs.

The tests check what these scans find (tests/unit/test_injection_rules.py); how long
they take depends on the machine and its load, so it is printed here instead of
asserted. Each figure is the best of ``--repeat`` runs, after a warm-up.

    .venv/bin/python bench/injection_scan.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.injection_cases import PATHOLOGICAL, buried_attack, pathological_id

from ragpulse.evaluators.injection_engine import scan_text


def best_of(text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        scan_text(text, document=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scan_text("warm up " * 100, document=True)
    document = buried_attack()
    print(f"2 MB document with a buried attack: {best_of(document, args.repeat):.3f}s")
    timed = [(best_of(text, args.repeat), pathological_id(text)) for text in PATHOLOGICAL]
    for seconds, name in sorted(timed, reverse=True):
        print(f"  {seconds:7.3f}s  {name}")
    print(f"hostile inputs: {len(timed)}, slowest {max(timed)[0]:.3f}s")


if __name__ == "__main__":
    main()
