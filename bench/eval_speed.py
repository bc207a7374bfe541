"""`ragpulse eval` against a bare regex+set K-Precision script, whole process against whole
process, over the same file, side by side in one run.

    python bench/eval_speed.py [FILE] [--runs 5]

FILE defaults to the SummEdits dev rows (../shared/data/dev/faithfulness_summedits_dev.jsonl).
Each command runs --runs times, interleaved (so a busy machine slows all of them alike);
printed: median and best wall time, rows/s at the median, the speed ratio to the bare script
(1.0 = as fast; the issue asks for >= 0.8), and peak RSS of the process.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "dev" / "faithfulness_summedits_dev.jsonl"


# Times one command and reads its peak RSS from a small process of its own: a child's peak
# RSS (wait4's ru_maxrss) starts from the memory of the process that forks it, so a command
# forked by a bench that holds ~150 MiB of traces would report ~150 MiB whatever it used.
_LAUNCHER = """
import os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(proc.pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status))
"""


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one whole process."""
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, text=True)
    wall, peak, code = out.stdout.split()
    if int(code) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return float(wall), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = sum(1 for line in args.file.open(encoding="utf-8") if line.strip())
    out = Path(tempfile.mkdtemp(prefix="ragpulse-eval-speed-"))
    ragpulse = shutil.which("ragpulse", path=str(Path(sys.executable).parent)) or "ragpulse"
    commands = {
        "bare K-Precision script": [sys.executable, str(ROOT / "bench" / "kprecision_bare.py"),
                                    str(args.file), str(out / "bare.jsonl")],
        "ragpulse eval (defaults)": [ragpulse, "eval", str(args.file), "-o",
                                     str(out / "defaults.jsonl")],
        "ragpulse eval --metrics faithfulness": [ragpulse, "eval", str(args.file), "-o",
                                                 str(out / "faith.jsonl"), "--metrics",
                                                 "faithfulness"],
        "ragpulse eval --metrics faithfulness/lexical": [
            ragpulse, "eval", str(args.file), "-o", str(out / "lex.jsonl"),
            "--metrics", "faithfulness/lexical"],
    }  # fmt: skip
    run(commands["ragpulse eval (defaults)"])  # warm the OS file cache and any on-disk cache
    walls: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, float] = dict.fromkeys(commands, 0.0)
    for _ in range(args.runs):
        for name, cmd in commands.items():
            wall, peak = run(cmd)
            walls[name].append(wall)
            rss[name] = max(rss[name], peak)
    bare = statistics.median(walls["bare K-Precision script"])
    print(f"{args.file.name}: {rows} rows, {args.runs} runs each, interleaved\n")
    print(f"{'command':46} {'median s':>9} {'best s':>8} {'rows/s':>8} {'speed':>6} {'RSS MiB':>8}")
    for name, values in walls.items():
        median = statistics.median(values)
        print(f"{name:46} {median:9.2f} {min(values):8.2f} {rows / median:8.0f} "
              f"{bare / median:5.2f}x {rss[name]:8.0f}")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
