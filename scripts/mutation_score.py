"""The mutation score of the last `mutmut run` (scripts/mutation.sh): reads `mutmut results --all true`
on stdin, prints killed / total per package and overall (with the survived, timeout and no-tests
counts) and writes the surviving mutants' names, one a line, to the file named as argument."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

# the packages docs/testing.md reports, longest prefix first
PACKAGES = ("dots.vectors", "dots.merge.methods", "dots.scoring", "dots.search.pick.pareto")
COLUMNS = ("killed", "survived", "timeout", "no tests", "other")


def package(mutant: str) -> str:
    return next((p for p in PACKAGES if mutant.startswith(p + ".")), "other")


def main() -> None:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors = []
    for line in sys.stdin:
        name, sep, status = line.strip().rpartition(": ")
        if not sep:
            continue
        column = status if status in COLUMNS else "other"
        counts[package(name)][column] += 1
        counts["overall"][column] += 1
        if status == "survived":
            survivors.append(name)
    print(f"{'package':26} {'killed/total':>14} {'score':>7}  " + " ".join(f"{c:>8}" for c in COLUMNS[1:]))
    for pkg in (*PACKAGES, "overall"):
        c = counts.get(pkg, Counter())
        total = sum(c.values())
        score = f"{100 * c['killed'] / total:6.1f}%" if total else "      -"
        print(f"{pkg:26} {c['killed']:>6} / {total:<6} {score}  " + " ".join(f"{c[k]:>8}" for k in COLUMNS[1:]))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text("".join(f"{s}\n" for s in sorted(survivors)))
        print(f"{len(survivors)} survivors listed in {sys.argv[1]}")


if __name__ == "__main__":
    main()
