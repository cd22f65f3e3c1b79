#!/usr/bin/env bash
# What dots does on a GPU node, in one command (#38): with a checkout and the project's
# dependencies installed (bash scripts/setup.sh), it runs
#   1. the tests that need CUDA (and the fused swap's and the timers' tests),
#   2. the doctor at Qwen2.5-7B widths, 2 layers, transformers engine,
#   3. the lab search with engine=hf (in a scratch outputs directory),
#   4. the per-form swap table (benchmarks/swap/fused.py: streaming vs fused, call returns vs
#      device done, memory-traffic floor, × floor, memory) at Qwen2.5-7B widths, 2 layers,
# and writes everything into one Markdown results file (the last argument, default
# benchmarks/results/gpu_check-<UTC time>.md). A failing step is recorded and the next one runs;
# the exit status says whether all passed. Aimed at under 8 minutes on one H100 or H200.
#
#   bash benchmarks/gpu/check.sh [results.md]
#   bash benchmarks/gpu/check.sh --cpu-smoke [results.md]   # the same steps, reduced, on a CPU
#   bash benchmarks/gpu/check.sh --fused [results.md]       # the swap's GPU-only lines (~3 min)
#   bash benchmarks/gpu/check.sh [--cpu-smoke|--fused] --list  # print the steps' commands, run none
#
# --fused (#49): only what a CPU cannot reach of the swap: the CUDA cases of the fused pass, the
# timers and the device stand-ins (Triton kernels, the real torch.cuda.synchronize, the race at
# start), the canary's CUDA tolerance, and the per-form swap table.
# --cpu-smoke (CI, machines without a GPU): the CPU device, tiny doctor shapes on the lab backbone
# (qwen7b's memory plan does not fit a CPU host), a 3-trial lab search, the swap table at Qwen2.5-0.5B widths with a 4,096-row vocabulary and 1 layer.
set -uo pipefail

if [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
smoke=0 fused=0 list=0
if [[ ${1:-} == --cpu-smoke ]]; then
  smoke=1
  shift
elif [[ ${1:-} == --fused ]]; then
  fused=1
  shift
fi
if [[ ${1:-} == --list ]]; then
  list=1
  shift
fi
if [[ ${1:-} == -* || $# -gt 1 ]]; then
  echo "benchmarks/gpu/check.sh: unexpected '$*' (usage: [--cpu-smoke|--fused] [--list] [results.md]; -h)" >&2
  exit 2
fi
OUT=${1:-benchmarks/results/gpu_check-$(date -u +%Y%m%dT%H%M%SZ).md}
((list)) && OUT=/dev/null
mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export DOTS_OUTPUTS="$WORK/outputs" DOTS_PROGRESS=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()
began=$SECONDS

# step NAME COMMAND...: run COMMAND, its output (last 80 lines) and duration into the results file.
step() {
  local name=$1 t=$SECONDS rc=0
  shift
  if ((list)); then
    printf '%q ' "$@"
    echo
    return
  fi
  echo "== $name: $*"
  "$@" >"$WORK/step.log" 2>&1 || rc=$?
  {
    echo "## $name"
    echo
    echo "\`$*\` — exit $rc, $((SECONDS - t)) s"
    echo
    echo '```'
    tail -n 80 "$WORK/step.log"
    echo '```'
    echo
  } >>"$OUT"
  tail -n 5 "$WORK/step.log"
  ((rc == 0)) || failed+=("$name")
}

{
  echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)$( ((smoke)) && echo ' (--cpu-smoke)')"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(uname -n), $(nproc) CPUs"
  echo
  echo '```'
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  "$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
  echo '```'
  echo
} >"$OUT"

TESTS=(tests/test_timing.py tests/test_synth.py)
if ((fused)); then
  step "CUDA tests of the swap" "$PYTHON" -m pytest -q -n0 -p no:cacheprovider tests/test_fused.py tests/test_timing.py \
    tests/test_device_branches.py tests/test_canary.py -k "cuda or test_timing or test_device_branches or hf_canary_passes"
  step "swap table, Qwen2.5-7B widths, 2 layers" "$PYTHON" -m benchmarks.swap fused --device cuda --shape qwen2.5-7b \
    --layers 2 --repeats 6 --workdir "$WORK/swap"
elif ((smoke)); then
  step "tests (CUDA ones skip here)" "$PYTHON" -m pytest -q -n0 -p no:cacheprovider "${TESTS[@]}" \
    -k "cuda or timer or device or scorer"
  step "doctor, tiny shapes, the lab backbone" "$PYTHON" -m dots.doctor --shapes benchmarks/shapes/qwen2.5-0.5b.json \
    --layers 2 engine=hf
  step "lab search, engine=hf, 3 trials" "$PYTHON" -m dots.search engine=hf search.n_trials=3 search.n_startup_trials=2 \
    pool.size=16 selection.n=4 selection.m=2 search.k=2
  step "swap table, 0.5B widths, 1 layer" "$PYTHON" -m benchmarks.swap fused --device cpu --shape qwen2.5-0.5b \
    --vocab 4096 --layers 1 --repeats 2 --workdir "$WORK/swap" --forms dense bitmask
else
  step "CUDA tests" "$PYTHON" -m pytest -q -n0 -p no:cacheprovider "${TESTS[@]}" tests/test_fused.py tests/test_canary.py \
    tests/test_device_branches.py
  step "doctor, Qwen2.5-7B widths" "$PYTHON" -m dots.doctor --shapes benchmarks/shapes/qwen2.5-7b.json --shape real \
    --layers 2 backbone=qwen7b engine=hf
  step "lab search, engine=hf" "$PYTHON" -m dots.search engine=hf
  step "swap table, Qwen2.5-7B widths, 2 layers" "$PYTHON" -m benchmarks.swap fused --device cuda --shape qwen2.5-7b \
    --layers 2 --repeats 6 --workdir "$WORK/swap"
fi

{
  echo "total $((SECONDS - began)) s; failed: ${failed[*]:-none}"
} >>"$OUT"
echo "results: $OUT (total $((SECONDS - began)) s; failed: ${failed[*]:-none})"
((${#failed[@]} == 0))
