#!/usr/bin/env bash
# Mutation check (issues #40, #49; outside CI): mutmut 3 over the core — dots/vectors, dots/merge,
# dots/scoring, dots/search/pick, dots/search/study, dots/io, dots/runtime, dots/engines/canary.py —
# with the fast in-process tests of those modules ([tool.mutmut] in pyproject.toml). Each mutant
# runs only the selected tests that reach the mutated function; one child at nice 19 (it must not
# starve anything else on the machine; MUTATION_CHILDREN=2 on an idle one), torch on one thread,
# the tests fastest first (tests/conftest.py). Results: tests/mutation/ (one file a module, merged
# from every run, kept in git: valid while the module's source is unchanged); docs/testing.md.
# A run over all mutants takes days on 2 shared cores: generate them once (`--generate`), then run
# them in pieces (NAME globs), continuing in later sessions, on any machine, with `--resume GLOB`:
# it runs the mutants with no result in tests/mutation/ yet.
#
#   scripts/mutation.sh [--sample K]  fresh run (removes mutants/) of every K-th mutant of the
#                                     sorted list (default K=30; K=1: all, 16,527 on 2026-12-07)
#   scripts/mutation.sh --generate    fresh mutants/ (removes it): every mutant and mutmut's
#                                     per-test stats, all listed in mutants/sample.txt, none run;
#                                     then run the core in pieces with NAME... or --resume GLOB...
#   scripts/mutation.sh --resume [GLOB...]  runs the mutants (mutants/ generated if missing, else
#                                     brought up to date with the sources and tests) with no
#                                     result in tests/mutation/ (those matching a GLOB, e.g.
#                                     'dots.scoring.*'), then the score
#   scripts/mutation.sh --survivors   reruns only the mutants in mutants/survivors.txt (after
#                                     adding tests), then the score
#   scripts/mutation.sh --ci          CI's sample: the modules changed since tests/mutation/ (below)
#   scripts/mutation.sh --score       the score of the mutants run so far (tests/mutation/ and
#                                     mutants/), nothing rerun
#   scripts/mutation.sh NAME...       (re)runs the named mutants (globs allowed: 'dots.scoring.*')
#
# Prints killed / run per package of the core (survived, timeout, no-tests apart; "not run": the
# mutants of mutants/sample.txt in that package not run yet) and per module with mutants run, and
# writes the survivors to mutants/survivors.txt; `mutmut show NAME` prints a mutant's diff. Time on
# 2 shared cores (AMD EPYC VM, other work running): generating the mutants and the stats ~12 min,
# the default sample of 218 mutants ~50 min (2026-11-28); per package: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
SAMPLE=${MUTATION_SAMPLE:-30}
CHILDREN=${MUTATION_CHILDREN:-1}
MUTMUT="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mutmut"
need_mutmut() {
  "$PY" -c "import mutmut" 2>/dev/null || "$PY" -m pip install -q "mutmut>=3.8,<4"
}
# mutmut puts mutants/ first on sys.path itself (and drops the repository root)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 DOTS_PROGRESS=0

# tests/mutation/ keeps every mutant run and its last status: a rerun replaces the statuses of the
# mutants it ran and keeps the others' (mutmut itself forgets all results when the test selection
# in pyproject.toml changes, e.g. when a test file is added to kill survivors)
score() {
  if [ -d mutants ]; then
    "$MUTMUT" results --all true | "$PY" scripts/mutation_score.py merge
  else
    "$PY" scripts/mutation_score.py score
  fi
}

# A fresh mutants/: the first call generates the mutants and the test stats, and stops (no mutant
# has that name); a test failing there stops mutmut ("failed to collect stats"), shown here. Then
# every K-th mutant of the sorted list goes into mutants/sample.txt.
generate() {
  rm -rf mutants
  stats mutants-generate.log
  mv mutants-generate.log mutants/generate.log
  "$MUTMUT" results --all true | sed -n 's/^ *\(.*\): not checked$/\1/p' | LC_ALL=C sort \
    | awk -v k="$1" '(NR - 1) % k == 0' >mutants/sample.txt
  echo "$(wc -l <mutants/sample.txt) mutants: every $1-th of $("$MUTMUT" results --all true | wc -l)"
}

# mutmut's set-up alone, logged to $1: the mutants of the modules changed since mutants/ was made
# are made again, the tests' stats brought up to date; then it stops (no mutant has that name).
stats() {
  nice -n 19 "$MUTMUT" run --max-children 1 "no-mutant-has-this-name" >"$1" 2>&1 || true
  if grep -q "failed to collect stats" "$1"; then
    tr '\r' '\n' <"$1" | grep -v "Running stats" | tail -40
    echo "mutmut's stats run failed: a selected test fails where mutmut runs it; to see which, run the"
    echo "selection in mutants/ as mutmut does: cd mutants && MUTANT_UNDER_TEST=stats python -m pytest ..."
    exit 1
  fi
}

# An existing mutants/ brought up to date: a changed module's mutants are renumbered, so
# mutants/sample.txt becomes the list of every mutant there is now.
refresh() {
  stats mutants/refresh.log
  "$MUTMUT" results --all true | sed -n 's/^ *\(dots\.[^:]*\): .*$/\1/p' | LC_ALL=C sort >mutants/sample.txt
}

# CI (.ci/run): nothing when every module of the core is as its results in tests/mutation/ were
# run; else a sample of the changed modules' mutants (every MUTATION_CI_EVERY-th, default 4) run
# in a copy of the checkout whose [tool.mutmut] mutates only them, with only the test files that
# reached them before, in at most MUTATION_CI_BUDGET_S seconds (default 600; mutmut's set-up, the
# stats run of those tests, counts and is not cut short), and judged by
# `mutation_score.py gate`: its score may not fall below min(90%, the modules' recorded score) by
# more than two standard errors of the sample.
ci() {
  local changed tests work rc=0
  mapfile -t changed < <("$PY" scripts/mutation_score.py changed)
  if [ ${#changed[@]} -eq 0 ]; then
    echo "mutation sample: every module of the core is as recorded in tests/mutation/: nothing to run"
    return 0
  fi
  echo "mutation sample: changed since their run in tests/mutation/: ${changed[*]}"
  need_mutmut
  tests=$("$PY" scripts/mutation_score.py tests "${changed[@]}")
  work=$(mktemp -d)
  cp -r dots tests scripts pyproject.toml "$work/"
  mkdir "$work/benchmarks" && cp -r benchmarks/shapes "$work/benchmarks/"
  [ -z "$tests" ] || "$PY" scripts/mutation_score.py narrow "$work/pyproject.toml" "${changed[*]}" "$tests"
  (
    cd "$work"
    t0=$SECONDS
    generate "${MUTATION_CI_EVERY:-4}"
    mapfile -t names < mutants/sample.txt
    left=$((${MUTATION_CI_BUDGET_S:-600} - (SECONDS - t0)))
    ((left > 0)) || left=1
    timeout --signal=INT --kill-after=30 "$left" \
      "$MUTMUT" run --max-children "$CHILDREN" "${names[@]}" >mutants/run.log 2>&1 || true
    "$MUTMUT" results --all true | "$PY" scripts/mutation_score.py gate "$OLDPWD/tests/mutation"
  ) || rc=$?
  rm -rf "$work"
  return $rc
}

start=$(date +%s)
case "${1:-}" in
  --ci) ci; exit ;;
  --score) [ -d mutants ] && need_mutmut; score; exit 0 ;;
esac
need_mutmut
case "${1:-}" in
  --generate) generate 1; exit 0 ;;
  --resume)
    shift
    if [ -f mutants/sample.txt ]; then refresh; else generate 1; fi
    globs=("${@:-*}")
    names=()
    while read -r name; do
      for glob in "${globs[@]}"; do
        # shellcheck disable=SC2053  # the glob matches as a pattern
        if [[ $name == $glob ]]; then names+=("$name"); break; fi
      done
    done < <(grep -vFxf <("$PY" scripts/mutation_score.py done) mutants/sample.txt)
    echo "${#names[@]} mutants of mutants/sample.txt not run yet (matching ${globs[*]})"
    [ ${#names[@]} -eq 0 ] || nice -n 19 "$MUTMUT" run --max-children "$CHILDREN" "${names[@]}" ;;
  --survivors)
    mapfile -t names < mutants/survivors.txt
    [ ${#names[@]} -gt 0 ] || { echo "no survivors listed"; exit 0; }
    nice -n 19 "$MUTMUT" run --max-children "$CHILDREN" "${names[@]}" ;;
  "" | --sample)
    [ "${1:-}" = --sample ] && SAMPLE=$2
    generate "$SAMPLE"
    mapfile -t names < mutants/sample.txt
    nice -n 19 "$MUTMUT" run --max-children "$CHILDREN" "${names[@]}" ;;
  *) nice -n 19 "$MUTMUT" run --max-children "$CHILDREN" "$@" ;;
esac
echo "mutmut run: $(( ($(date +%s) - start) / 60 )) min"
score
