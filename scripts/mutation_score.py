"""The mutation score (scripts/mutation.sh): reads `mutmut results --all true` on stdin, merges it
into RESULTS (name: status lines; a mutant's new status replaces its old one, "not checked" never
does), prints killed / total per package and overall (with the survived, timeout and no-tests
counts) and writes the surviving mutants' names, one a line, to SURVIVORS. With SAMPLE (names,
one a line), only the mutants it names count.

    mutmut results --all true | python scripts/mutation_score.py RESULTS SURVIVORS [SAMPLE]
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

# the packages docs/testing.md reports
PACKAGES = ("dots.vectors", "dots.merge.methods", "dots.scoring", "dots.search.pick.pareto")
COLUMNS = ("killed", "survived", "timeout", "no tests", "other")


def package(mutant: str) -> str:
    return next((p for p in PACKAGES if mutant.startswith(p + ".")), "other")


def parse(lines: list[str]) -> dict[str, str]:
    statuses = {}
    for line in lines:
        name, sep, status = line.strip().rpartition(": ")
        if sep and status != "not checked":
            statuses[name] = status
    return statuses


def main() -> None:
    results, survivors_path = Path(sys.argv[1]), Path(sys.argv[2])
    statuses = parse(results.read_text().splitlines()) if results.exists() else {}
    statuses.update(parse(sys.stdin.read().splitlines()))
    if len(sys.argv) > 3:
        sample = set(Path(sys.argv[3]).read_text().split())
        statuses = {name: status for name, status in statuses.items() if name in sample}
    results.write_text("".join(f"{name}: {status}\n" for name, status in sorted(statuses.items())))
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in statuses.items():
        column = status if status in COLUMNS else "other"
        counts[package(name)][column] += 1
        counts["overall"][column] += 1
    print(f"{'package':26} {'killed/total':>14} {'score':>7}  " + " ".join(f"{c:>8}" for c in COLUMNS[1:]))
    for pkg in (*PACKAGES, "overall"):
        c = counts.get(pkg, Counter())
        total = sum(c.values())
        score = f"{100 * c['killed'] / total:6.1f}%" if total else "      -"
        print(f"{pkg:26} {c['killed']:>6} / {total:<6} {score}  " + " ".join(f"{c[k]:>8}" for k in COLUMNS[1:]))
    survivors = sorted(name for name, status in statuses.items() if status == "survived")
    survivors_path.write_text("".join(f"{s}\n" for s in survivors))
    print(f"{len(survivors)} survivors listed in {survivors_path}")


if __name__ == "__main__":
    main()
