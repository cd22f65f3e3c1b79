"""The mutation score (scripts/mutation.sh): reads `mutmut results --all true` on stdin, merges it
into RESULTS (name: status lines; a mutant's new status replaces its old one, "not checked" never
does), prints killed / run per package of the core and per module with mutants run (with the
survived, timeout, no-tests counts and the mutants not run yet) and writes the surviving mutants'
names, one a line, to SURVIVORS. With SAMPLE (names, one a line), only the mutants it names count.

    mutmut results --all true | python scripts/mutation_score.py RESULTS SURVIVORS [SAMPLE]
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

# the packages of the core ([tool.mutmut] only_mutate in pyproject.toml)
PACKAGES = (
    "dots.vectors",
    "dots.merge",
    "dots.scoring",
    "dots.search.pick",
    "dots.search.study",
    "dots.io",
    "dots.runtime",
    "dots.engines.canary",
)
COLUMNS = ("killed", "survived", "timeout", "no tests", "other")


def package(mutant: str) -> str:
    return next((p for p in PACKAGES if mutant.startswith(p + ".")), "other")


def module(mutant: str) -> str:
    """A mutant's module: its name is MODULE.x_FUNCTION__mutmut_N (methods: MODULE.xǁCLASSǁNAME__mutmut_N)."""
    return re.split(r"\.x[_ǁ]", mutant, maxsplit=1)[0]


def parse(lines: list[str]) -> tuple[dict[str, str], set[str]]:
    """The statuses of the mutants run, and the names of every mutant listed."""
    statuses, names = {}, set()
    for line in lines:
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            names.add(name)
            if status != "not checked":
                statuses[name] = status
    return statuses, names


def row(label: str, c: Counter[str], not_run: int) -> str:
    total = sum(c[k] for k in COLUMNS)
    score = f"{100 * c['killed'] / total:6.1f}%" if total else "      -"
    counts = " ".join(f"{c[k]:>8}" for k in COLUMNS[1:])
    return f"{label:40} {c['killed']:>6} / {total:<6} {score}  {counts} {not_run:>8}"


def main() -> None:
    results, survivors_path = Path(sys.argv[1]), Path(sys.argv[2])
    statuses = parse(results.read_text().splitlines())[0] if results.exists() else {}
    new, names = parse(sys.stdin.read().splitlines())
    statuses.update(new)
    if len(sys.argv) > 3:
        sample = set(Path(sys.argv[3]).read_text().split())
        statuses = {name: status for name, status in statuses.items() if name in sample}
        names &= sample
    results.write_text("".join(f"{name}: {status}\n" for name, status in sorted(statuses.items())))
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    not_run: Counter[str] = Counter()
    for name in names | set(statuses):
        keys = {package(name), module(name), "overall"}  # a package of one module: once
        status = statuses.get(name)
        for key in keys:
            if status is None:
                not_run[key] += 1
            else:
                counts[key][status if status in COLUMNS else "other"] += 1
    header = " ".join(f"{c:>8}" for c in (*COLUMNS[1:], "not run"))
    print(f"{'package / module':40} {'killed / run':>15} {'score':>7}  {header}")
    for pkg in (*PACKAGES, "other", "overall"):
        if pkg == "other" and not counts[pkg] and not not_run[pkg]:
            continue
        print(row(pkg, counts[pkg], not_run[pkg]))
        for mod in sorted(m for m in counts if package(m + ".x") == pkg and m not in PACKAGES):
            print(row("  " + mod.removeprefix(pkg + "."), counts[mod], not_run[mod]))
    survivors = sorted(name for name, status in statuses.items() if status == "survived")
    survivors_path.write_text("".join(f"{s}\n" for s in survivors))
    print(f"{len(survivors)} survivors listed in {survivors_path}")


if __name__ == "__main__":
    main()
