#!/usr/bin/env bash
# Build the wheel, install it (not editable) into a fresh virtual environment, and from a
# directory outside the checkout run the installed `dots` command: `dots --help`, a merge on
# generated checkpoints, and resolve the users' command `dots search backbone=qwen7b --cfg job`.
# With --search also a 3-trial lab search with Optuna's GP sampler, which needs scipy: the
# venv has none until the wheel's dependencies bring it. Prints a transcript.
#
#   bash scripts/wheel_check.sh            # keeps nothing: venv and work dir are temporary
#   bash scripts/wheel_check.sh --search   # + dots search sampler=gp backbone=lab (~2 min more)
#
# Environment: PYTHON (default python), DOTS_TORCH_INDEX (extra index for the CPU torch wheel).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
TORCH_VERSION=2.13.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "[wheel] $*"; }
t0=$SECONDS
search=0
[[ ${1:-} == --search ]] && search=1

say "building the wheel from $REPO"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$REPO" 2>&1 | grep -v "^WARNING: Location" || true
wheel=$(ls "$work"/dist/dots_synth-*.whl)
say "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1)); its data files:"
"$PYTHON" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for prefix in ("dots/conf/", "dots/data/math/", "dots/data/lab/"):
    print(f"  {prefix}: {sum(n.startswith(prefix) for n in names)} files")
PY

say "fresh virtual environment $work/venv"
"$PYTHON" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
index=()
[[ -n ${DOTS_TORCH_INDEX:-} ]] && index=(--extra-index-url "$DOTS_TORCH_INDEX")
"$venv_py" -m pip install -q --progress-bar off "${index[@]}" "torch==$TORCH_VERSION" 2>&1 | grep -v "^WARNING: Location" || true
if "$venv_py" -c "import scipy" 2>/dev/null; then
  echo "error: the fresh venv already has scipy before dots is installed" >&2
  exit 1
fi
say "before the wheel: no scipy in the venv"
"$venv_py" -m pip install -q --progress-bar off "${index[@]}" "$wheel" 2>&1 | grep -v "^WARNING: Location" || true
say "installed in $((SECONDS - t0)) s: $("$venv_py" -m pip list 2>/dev/null | grep -iE "^(dots-synth|scipy|sympy|optuna|transformers) " | tr -s ' ' | paste -sd, -)"
dots="$work/venv/bin/dots"
[[ -x $dots ]] || { echo "error: the wheel installed no \`dots\` command" >&2; exit 1; }

mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
"$venv_py" - <<'PY'
import dots, sys
from pathlib import Path
where = Path(dots.__file__).resolve()
print(f"[wheel] dots {dots.__version__} imported from {where.parent}")
assert "site-packages" in where.parts, "dots must come from the installed wheel, not a checkout"
PY

say "dots --help"
"$dots" --help

say "generated checkpoints, then: dots merge method=ties backbone=custom ..."
"$venv_py" -c "
from dots.testing import make_tiny_model, make_finetuned
base = make_tiny_model('ckpt/base', dtype=__import__('torch').bfloat16)
make_finetuned(base, 'ckpt/sft', seed=1)
make_finetuned(base, 'ckpt/rlvr', seed=2, density=0.1)
"
DOTS_PROGRESS=0 "$dots" merge method=ties backbone=custom backbone.base=ckpt/base \
  +backbone.sources.sft=ckpt/sft +backbone.sources.rlvr=ckpt/rlvr output=merged/ties
ls merged/ties

say "dots search backbone=qwen7b --cfg job --resolve"
"$dots" search backbone=qwen7b --cfg job --resolve > qwen7b.yaml
grep -E "^  (base|name):|^    (sft|rlvr):|^  path:" qwen7b.yaml
pool=$(grep -E "^  path:" qwen7b.yaml | awk '{print $2}')
[[ -f $pool ]] || { echo "error: the packaged pool $pool does not exist" >&2; exit 1; }
say "the packaged pool resolves to an existing file: $pool"
[[ -z $(ls -A "$work/elsewhere/outputs" 2>/dev/null) ]] && say "no outputs/ directory was left behind"

if ((search)); then
  say "dots search sampler=gp backbone=lab (3 trials, engine=hf), outside the checkout"
  t_search=$SECONDS
  DOTS_PROGRESS=0 DOTS_CACHE="$work/cache" "$dots" search sampler=gp backbone=lab engine=hf search.n_trials=3 \
    search.n_startup_trials=2 pool.size=16 selection.n=4 selection.m=2 search.k=2 run_dir="$work/gp-run" \
    | tail -n 5
  "$venv_py" - "$work/gp-run" <<'PY'
import sys, yaml
from pathlib import Path
sampler = yaml.safe_load((Path(sys.argv[1]) / "config.yaml").read_text())["sampler"]
assert sampler["name"] == "gp", sampler
print(f"[wheel] the run's sampler: {sampler}")
PY
  [[ -f $work/gp-run/result.yaml ]] || { echo "error: the gp search wrote no result.yaml" >&2; exit 1; }
  say "gp search done in $((SECONDS - t_search)) s: $(grep -E "^trial:|^complete_trials:" "$work/gp-run/result.yaml" | tr '\n' ' ')"
  "$venv_py" -c "import scipy; print(f'[wheel] scipy {scipy.__version__} came with the wheel')"
fi
say "done in $((SECONDS - t0)) s"
