"""What each install takes: disk and distributions of a fresh venv per extra.

Builds this checkout's wheel once, then for each spec (``ragpulse`` alone, the SDK an app
imports; ``[collector]``; ``[collector,kafka,redis]``) makes a fresh venv, installs the
wheel with that spec from the package index, and prints the venv's size and the number
of distributions it holds, each also net of an empty venv (pip and setuptools), and the
distributions the SDK alone installs.

    .venv/bin/python bench/install_size.py [--specs '' collector collector,kafka,redis]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str | Path) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True)
    return done.stdout


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def venv(where: Path, wheel: Path | None, extras: str) -> tuple[float, list[str]]:
    """(size in MB, distributions) of a fresh venv with ``wheel[extras]`` installed."""
    run(sys.executable, "-m", "venv", where)
    python = where / "bin" / "python"
    if wheel is not None:
        spec = f"{wheel}[{extras}]" if extras else str(wheel)
        run(python, "-m", "pip", "install", "--quiet", spec)
    listed = json.loads(run(python, "-m", "pip", "list", "--format", "json"))
    return size_mb(where), sorted(d["name"].lower() for d in listed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", nargs="*", default=["", "collector", "collector,kafka,redis"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
            "--no-build-isolation", ROOT, "-w", work / "wheel")  # fmt: skip
        [wheel] = (work / "wheel").glob("ragpulse-*.whl")
        base_mb, base = venv(work / "empty", None, "")
        print(f"{'install':<40} {'venv MB':>8} {'net MB':>7} {'dists':>6} {'net':>4}")
        print(f"{'(an empty venv)':<40} {base_mb:8.1f} {0:7.1f} {len(base):6d} {0:4d}")
        for extras in args.specs:
            mb, dists = venv(work / f"v{len(extras)}", wheel, extras)
            name = f"ragpulse[{extras}]" if extras else "ragpulse (the SDK)"
            print(f"{name:<40} {mb:8.1f} {mb - base_mb:7.1f} {len(dists):6d} "
                  f"{len(dists) - len(base):4d}")  # fmt: skip
            if not extras:
                print("  " + ", ".join(d for d in dists if d not in base))


if __name__ == "__main__":
    main()
