#!/usr/bin/env bash
# Mutation check (issues #40, #49; outside CI): mutmut 3 over the core — dots/vectors, dots/merge,
# dots/scoring, dots/search/pick, dots/search/study, dots/io, dots/runtime, dots/engines/canary.py —
# with the fast in-process tests of those modules ([tool.mutmut] in pyproject.toml). Each mutant
# runs only the selected tests that reach the mutated function; one child at nice 19 (it must not
# starve anything else on the machine), torch on one thread. Results: docs/testing.md.
# A run over all mutants takes days on 2 shared cores: start it with `--sample 1`, and continue
# it in later sessions with `--resume` (mutants/ keeps every result; do not delete it).
#
#   scripts/mutation.sh [--sample K]  fresh run (removes mutants/) of every K-th mutant of the
#                                     sorted list (default K=30; K=1: all 6522 mutants)
#   scripts/mutation.sh --resume      runs the mutants of mutants/sample.txt not run yet (after an
#                                     interruption), then the score
#   scripts/mutation.sh --survivors   reruns only the mutants in mutants/survivors.txt (after
#                                     adding tests), then the score
#   scripts/mutation.sh --score       the score of the last run, nothing rerun
#   scripts/mutation.sh NAME...       reruns the named mutants (globs allowed: 'dots.scoring.*')
#
# Prints killed / total per package and overall (survived, timeout, no-tests apart; total counts
# the mutants run) and writes the survivors to mutants/survivors.txt; `mutmut show NAME` prints
# a mutant's diff. Time on 2 shared cores (AMD EPYC VM, other work running, measured 2026-11-28):
# the default sample of 218 mutants ~50 min, rerunning the 76 not killed 23 min; all 6,522
# mutants would take many hours (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
SAMPLE=${MUTATION_SAMPLE:-30}
if ! "$PY" -c "import mutmut" 2>/dev/null; then
  "$PY" -m pip install "mutmut>=3.8,<4"
fi
MUTMUT="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mutmut"
# mutmut puts mutants/ first on sys.path itself (and drops the repository root)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 DOTS_PROGRESS=0

# mutants/results.txt keeps every mutant run and its last status: a rerun replaces the statuses
# of the mutants it ran and keeps the others' (mutmut itself forgets all results when the test
# selection in pyproject.toml changes, e.g. when a test file is added to kill survivors); only
# the mutants of mutants/sample.txt count
score() {
  "$MUTMUT" results --all true | "$PY" scripts/mutation_score.py mutants/results.txt mutants/survivors.txt mutants/sample.txt
}

start=$(date +%s)
case "${1:-}" in
  --score) score; exit 0 ;;
  --resume)
    mapfile -t names < <("$MUTMUT" results --all true | sed -n 's/^ *\(.*\): not checked$/\1/p' \
      | grep -Fxf mutants/sample.txt)
    echo "${#names[@]} mutants of mutants/sample.txt not run yet"
    [ ${#names[@]} -eq 0 ] || nice -n 19 "$MUTMUT" run --max-children 1 "${names[@]}" ;;
  --survivors)
    mapfile -t names < mutants/survivors.txt
    [ ${#names[@]} -gt 0 ] || { echo "no survivors listed"; exit 0; }
    nice -n 19 "$MUTMUT" run --max-children 1 "${names[@]}" ;;
  "" | --sample)
    [ "${1:-}" = --sample ] && SAMPLE=$2
    rm -rf mutants
    # the first call generates the mutants and the test stats, and stops: no mutant is named
    nice -n 19 "$MUTMUT" run --max-children 1 "no-mutant-has-this-name" >mutants-generate.log 2>&1 || true
    mv mutants-generate.log mutants/generate.log
    "$MUTMUT" results --all true | sed -n 's/^ *\(.*\): not checked$/\1/p' | LC_ALL=C sort \
      | awk -v k="$SAMPLE" '(NR - 1) % k == 0' >mutants/sample.txt
    echo "$(wc -l <mutants/sample.txt) mutants: every $SAMPLE-th of $("$MUTMUT" results --all true | wc -l)"
    mapfile -t names < mutants/sample.txt
    nice -n 19 "$MUTMUT" run --max-children 1 "${names[@]}" ;;
  *) nice -n 19 "$MUTMUT" run --max-children 1 "$@" ;;
esac
echo "mutmut run: $(( ($(date +%s) - start) / 60 )) min"
score
