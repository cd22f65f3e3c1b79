#!/usr/bin/env bash
# Every merge of the lab trio scored against the lab's ground truth, in one evaluate table.
#
#   bash benchmarks/pick/methods.sh [SEARCH_RUN_DIR]
#
# Merges the lab trio with each baseline (docs/method.md §5, default hyper-parameters of
# conf/method/*.yaml) and with DoTS at the fixed coefficients of the paper's ablations
# (λ = (1, 1) and (0.5, 0.5) over the sparsified τ̃), then scores base, SFT, RLVR, the
# DoTS pick (SEARCH_RUN_DIR/model, default: the run of the README's main command) and all
# merges with one `python -m dots.evaluate` call on the lab test sets (1024 problems per
# skill, avg@4 at T = 0.6). Extra arguments after the run directory go to dots.evaluate
# (e.g. engine=hf). Output: ${DOTS_OUTPUTS:-outputs}/evaluate/lab-methods/scores.{md,json,png}.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${DOTS_OUTPUTS:-outputs}
RUN=${1:-}
if [[ -z $RUN ]]; then
  RUN=$(ls -dt "$OUT"/search/lab-* 2>/dev/null | head -1 || true)
fi
[[ -n $RUN && -d $RUN/model ]] || { echo "error: no exported search model (run python -m dots.search first, or pass its run directory)" >&2; exit 2; }
shift || true

declare -A METHODS=(
  [task_arithmetic]="method=task_arithmetic"
  [ties]="method=ties"
  [dare_ties]="method=dare_ties"
  [ram_plus]="method=ram_plus"
  [sar]="method=sar"
  [fixed_1_1]="method=dots_fixed method.weights={sft:1.0,rlvr:1.0}"
  [fixed_05_05]="method=dots_fixed method.weights={sft:0.5,rlvr:0.5}"
)
models=(+models.dots_pick="$RUN/model")
for name in task_arithmetic ties dare_ties ram_plus sar fixed_1_1 fixed_05_05; do
  dir=$OUT/merged/lab/$name
  if [[ ! -f $dir/config.json ]]; then
    # shellcheck disable=SC2086
    python -m dots.merge ${METHODS[$name]} output="$dir" overwrite=true
  fi
  models+=(+models."$name"="$dir")
done
python -m dots.evaluate name=lab-methods "${models[@]}" "$@"
