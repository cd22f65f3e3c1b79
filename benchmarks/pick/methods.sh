#!/usr/bin/env bash
# Every merge of the lab trio scored against the lab's ground truth, in one evaluate table.
#
#   bash benchmarks/pick/methods.sh [SEARCH_RUN_DIR]
#
# Merges the lab trio with each baseline (docs/method.md §5, default hyper-parameters of
# conf/method/*.yaml) and with DoTS at the fixed coefficients of the paper's ablations
# (λ = (1, 1) and (0.5, 0.5) over the sparsified τ̃), then scores base, SFT, RLVR, the
# DoTS pick (SEARCH_RUN_DIR/model, default: the newest lab search; a run directory with only
# result.yaml, such as docs/figures/lab/landscape-run, has its pick merged at the recorded λ)
# and all merges with one `python -m dots.evaluate` call on the lab test sets (1024 problems
# per skill, avg@4 at T = 0.6). Extra arguments after the run directory go to dots.evaluate
# (docs/lab.md: benchmarks=[lab_greedy] engine=hf engine.dtype=float32). Output: ${DOTS_OUTPUTS:-outputs}/evaluate/lab-methods/scores.{md,json,png}.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
if [[ ${1:-} == -* ]]; then
  echo "benchmarks/pick/methods.sh: unexpected '$1' (usage: [SEARCH_RUN_DIR] [dots.evaluate overrides]; -h)" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."

OUT=${DOTS_OUTPUTS:-outputs}
RUN=${1:-}
if [[ -z $RUN ]]; then
  RUN=$(ls -dt "$OUT"/search/lab-* 2>/dev/null | head -1 || true)
fi
shift || true
PICK=$RUN/model
if [[ -n $RUN && ! -d $PICK && -f $RUN/result.yaml ]]; then
  # a run directory without its model (docs/figures/lab/landscape-run): the pick merged again at
  # result.yaml's λ, as the search exports it (method=dots_fixed over τ̃)
  PICK=$OUT/merged/lab/dots_pick
  weights=$(python -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1]))["coefficients"]; print(" ".join(f"+method.weights.{k}={v!r}" for k, v in c.items()))' "$RUN/result.yaml")
  # shellcheck disable=SC2086
  python -m dots.merge method=dots_fixed $weights output="$PICK"
fi
[[ -n $RUN && -d $PICK ]] || { echo "error: no exported search model (run python -m dots.search first, or pass its run directory)" >&2; exit 2; }

declare -A METHODS=(
  [task_arithmetic]="method=task_arithmetic"
  [ties]="method=ties"
  [dare_ties]="method=dare_ties"
  [ram_plus]="method=ram_plus"
  [sar]="method=sar"
  [fixed_1_1]="method=dots_fixed method.weights={sft:1.0,rlvr:1.0}"
  [fixed_05_05]="method=dots_fixed method.weights={sft:0.5,rlvr:0.5}"
)
models=(+models.dots_pick="$PICK")
for name in task_arithmetic ties dare_ties ram_plus sar fixed_1_1 fixed_05_05; do
  dir=$OUT/merged/lab/$name
  if [[ ! -f $dir/config.json ]]; then
    # shellcheck disable=SC2086
    python -m dots.merge ${METHODS[$name]} output="$dir" overwrite=true
  fi
  models+=(+models."$name"="$dir")
done
python -m dots.evaluate name=lab-methods "${models[@]}" "$@"
