#!/usr/bin/env bash
# Run the core tests at the bounds pyproject.toml claims: a fresh virtual environment with every
# direct dependency at the LOWEST version allowed (uv's `--resolution lowest-direct`), or at the
# NEWEST (`--resolution highest`), dots installed editable from this checkout with its test
# extra. torch stays the CPU wheel (DOTS_TORCH, default the torch-2.13.0+cpu wheel found in pip's
# find-links, else `torch==2.13.0` from the PyTorch CPU index): a resolver must never pull a
# CUDA build onto a CPU machine. Prints the direct dependencies' versions and pytest's summary.
#
#   bash scripts/dependency_bounds.sh lowest            # the floors
#   bash scripts/dependency_bounds.sh newest            # the newest releases
#   bash scripts/dependency_bounds.sh lowest -k ties    # extra pytest arguments
#
# Environment: PYTHON (the interpreter for the venv; default python), UV (a uv binary; default
# uv on PATH, else one installed into a private venv under $TMPDIR), DOTS_TORCH (a torch wheel
# path or requirement), DOTS_BOUNDS_KEEP=1 (keep the venv; its path is printed), DOTS_BOUNDS_LOCK
# (a file: pytest waits for `flock` on it, so that heavy runs on a shared machine queue),
# DOTS_BOUNDS_TESTS (the tests to run instead of the core ones, space-separated).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
shift || true
case $mode in
  lowest) resolution=lowest-direct ;;
  newest) resolution=highest ;;
  *)
    echo "usage: $0 lowest|newest [pytest args ...]" >&2
    exit 2
    ;;
esac
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
say() { echo "[bounds:$mode] $*"; }
t0=$SECONDS

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

if [[ -n ${DOTS_BOUNDS_TESTS:-} ]]; then read -r -a CORE_TESTS <<<"$DOTS_BOUNDS_TESTS"; fi

UV=${UV:-$(command -v uv || true)}
if [[ -z $UV ]]; then
  uv_venv=${TMPDIR:-/tmp}/dots-bounds-uv
  [[ -x $uv_venv/bin/uv ]] || { "$PYTHON" -m venv "$uv_venv" && "$uv_venv/bin/pip" install -q uv; }
  UV=$uv_venv/bin/uv
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dots-bounds-$mode.XXXXXX")
[[ ${DOTS_BOUNDS_KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT

# pip's own configuration (find-links, extra indexes) passed on to uv
uv_args=(--index-strategy unsafe-best-match)
find_links=$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)
for dir in ${PIP_FIND_LINKS:-} $find_links; do uv_args+=(--find-links "$dir"); done
for url in $("$PYTHON" -m pip config get global.extra-index-url 2>/dev/null || true); do
  uv_args+=(--extra-index-url "$url")
done

if [[ -z ${DOTS_TORCH:-} ]]; then
  for dir in ${PIP_FIND_LINKS:-} $find_links; do
    for wheel in "$dir"/torch-2.13.0+cpu-*.whl; do [[ -f $wheel ]] && DOTS_TORCH=$wheel; done
  done
fi
if [[ -f ${DOTS_TORCH:-} ]]; then
  echo "torch @ file://$DOTS_TORCH" >"$work/override.txt"
else
  echo "${DOTS_TORCH:-torch==2.13.0}" >"$work/override.txt"
  uv_args+=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
say "torch: $(cat "$work/override.txt")"

"$UV" venv -q --python "$PYTHON" "$work/venv"
venv_py=$work/venv/bin/python
say "resolving dots-synth[test] with --resolution $resolution ($("$venv_py" -V))"
"$UV" pip install -q --python "$venv_py" --resolution "$resolution" --override "$work/override.txt" \
  "${uv_args[@]}" -e "$REPO[test]"
say "installed in $((SECONDS - t0)) s; the direct dependencies:"
"$venv_py" - "$REPO" <<'PY'
import sys, tomllib
from importlib import metadata
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

project = tomllib.loads((Path(sys.argv[1]) / "pyproject.toml").read_text())["project"]
names = [Requirement(r).name for r in project["dependencies"] + project["optional-dependencies"]["test"]]
print("  " + ", ".join(f"{n}=={metadata.version(n)}" for n in names))
PY
if "$venv_py" -c "import vllm" 2>/dev/null; then say "warning: vllm is importable"; fi

say "pytest ${CORE_TESTS[*]} $*"
cd "$REPO"
set +e
lock=()
[[ -n ${DOTS_BOUNDS_LOCK:-} ]] && lock=(flock "$DOTS_BOUNDS_LOCK")
DOTS_CACHE="$work/cache" DOTS_OUTPUTS="$work/outputs" PYTHONPATH="$REPO" \
  "${lock[@]}" "$venv_py" -m pytest -q -p no:cacheprovider "${CORE_TESTS[@]}" "$@" 2>&1 | tail -n 40
rc=${PIPESTATUS[0]}
set -e
[[ ${DOTS_BOUNDS_KEEP:-0} == 1 ]] && say "kept $work/venv"
say "pytest exit code $rc; done in $((SECONDS - t0)) s"
exit "$rc"
