"""The mutation score (scripts/mutation.sh) and the results it is computed from, kept in the
repository: a file of tests/mutation/, named after its module, holds, for one module of the core, the status of every
mutant run so far, valid for the source it was run on (its git blob hash, in the header; a
module whose source changed has no valid results until it is run again). Sessions on different
machines merge into the same files, so a run over all of the core can go in pieces.

    mutmut results --all true | python scripts/mutation_score.py merge  # add mutmut's statuses, score
    python scripts/mutation_score.py score                               # the score, nothing merged
    python scripts/mutation_score.py done                                # names with a valid result
    python scripts/mutation_score.py changed       # modules of the core changed since their run
    python scripts/mutation_score.py tests MODULE...   # the test files that reached them
    python scripts/mutation_score.py narrow PYPROJECT "MODULE..." "TEST..."  # a copy's [tool.mutmut]
    python scripts/mutation_score.py reason "KIND: WHY" NAME...   # a survivor accounted for
    mutmut results --all true | python scripts/mutation_score.py gate RECORDED  # CI's sample

`merge` reads mutmut's `NAME: STATUS` lines (every mutant generated, "not checked" for those not
run), replaces the stored status of each mutant run, prints killed / run per package of the
core and per module (survived, timeout, no tests and "not run" apart) and writes the survivors'
names to mutants/survivors.txt. Killed counts mutants failed by a test, by a timeout of a test or
by the interpreter (segfault). Without mutants/ (a fresh clone) `score` reads only the store.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "tests" / "mutation"
REASONS = STORE / "reasons.tsv"
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
KILLED = {"killed", "segfault"}  # a crash of the interpreter under the mutant fails the tests too
NAME = re.compile(r"^(?P<module>.+?)\.(?P<function>x[_ǁ].*)__mutmut_(?P<n>\d+)$")


def package(module: str) -> str:
    return next((p for p in PACKAGES if module == p or module.startswith(p + ".")), "other")


def source_of(module: str) -> Path:
    path = ROOT / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def blob_hash(path: Path) -> str:
    """git's blob hash of a file (`git hash-object`): sha1 of "blob SIZE\\0" + the bytes."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def ranges(numbers: list[int]) -> str:
    """1,2,3,5 -> "1-3,5"."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)


def numbers(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def fields(line: str) -> dict[str, str]:
    """The key=value fields of a store file's header line."""
    return dict(re.findall(r"(\w+)=(\S+)", line))


def header(module: str, store: Path | None = None) -> dict[str, str]:
    path = (store or STORE) / f"{module}.txt"
    return fields(path.read_text().split("\n", 1)[0]) if path.exists() else {}


def load(module: str, store: Path | None = None, stale: bool = False) -> tuple[dict[str, str], int | None]:
    """The valid stored statuses of MODULE's mutants (name -> status) and its mutant count (with
    `stale`, those of a source that changed since, too)."""
    path = (store or STORE) / f"{module}.txt"
    if not path.exists():
        return {}, None
    lines = path.read_text().splitlines()
    head = fields(lines[0])
    if not stale and head.get("source") != blob_hash(source_of(module)):
        return {}, None  # the source changed since: its mutants are other mutants now
    statuses = {}
    for line in lines[1:]:
        status, function, spans = line.split("\t")
        for n in numbers(spans):
            statuses[f"{module}.{function}__mutmut_{n}"] = status
    return statuses, int(head["mutants"])


def save(module: str, statuses: dict[str, str], total: int, tests: set[str]) -> None:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for name, status in statuses.items():
        m = NAME.match(name)
        assert m, name
        groups[(status, m["function"])].append(int(m["n"]))
    STORE.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{s}\t{f}\t{ranges(ns)}\n" for (s, f), ns in sorted(groups.items()))
    files = ",".join(sorted(tests)) or "-"
    head = f"# mutmut results source={blob_hash(source_of(module))} mutants={total} tests={files}\n"
    (STORE / f"{module}.txt").write_text(head + body)


def mutated_as_it_is(module: str) -> bool:
    """Whether mutants/ holds the module's mutants of its current source: mutmut writes them after
    copying the source, so a source edited since is newer than its copy there."""
    source = source_of(module)
    return source.stat().st_mtime <= (ROOT / "mutants" / source.relative_to(ROOT)).stat().st_mtime


def reaching_tests(module: str) -> set[str]:
    """The test files that reached any function of MODULE in mutmut's stats run (mutants/)."""
    stats = ROOT / "mutants" / "mutmut-stats.json"
    if not stats.exists():
        return set(filter(None, header(module).get("tests", "-").strip("-").split(",")))
    by_function = json.loads(stats.read_text())["tests_by_mangled_function_name"]
    prefix = module + ".x"
    return {t.split("::")[0] for f, ts in by_function.items() if f.startswith(prefix) for t in ts}


def core_modules() -> list[str]:
    """The modules of the core with code in a function (the others have no mutants)."""
    paths = [p for pkg in PACKAGES for p in sorted(ROOT.glob(pkg.replace(".", "/") + "*/**/*.py"))]
    paths += [p for pkg in PACKAGES if (p := source_of(pkg)).is_file()]
    found = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in paths}
    return sorted(m for m in found if re.search(r"^\s*def ", source_of(m).read_text(), re.M))


def changed() -> list[str]:
    """The core's modules whose source is not the one their stored results were run on."""
    return [m for m in core_modules() if header(m).get("source") != blob_hash(source_of(m))]


def narrow(pyproject: Path, modules: list[str], tests: list[str]) -> None:
    """Rewrites [tool.mutmut] of PYPROJECT (a copy's) to mutate only MODULES with only TESTS (the
    selection's other arguments kept), for CI's sample."""
    paths = [str(source_of(m).relative_to(ROOT)) for m in modules]
    text = re.sub(r"(?ms)^only_mutate = \[.*?^\]", f"only_mutate = {json.dumps(paths)}", pyproject.read_text())
    selection = re.compile(r'(?ms)^(pytest_add_cli_args_test_selection = \[\n)(?:  (?:"tests/|#)[^\n]*\n)+')
    text, n = selection.subn(lambda m: m[1] + "".join(f'  "{t}",\n' for t in tests), text)
    assert n == 1 and 'only_mutate = ["' in text, "pyproject.toml: [tool.mutmut] not as expected"
    pyproject.write_text(text)


def gate(sample: dict[str, dict[str, str]], recorded: Path, minimum: float = 90.0) -> bool:
    """CI's check of a sample of the changed modules' mutants: its score may fall short of
    min(MINIMUM, the score recorded for those modules before the change) by two standard errors
    of the sample's score (sqrt(p(1 - p) / n)), no more."""
    run = [s for statuses in sample.values() for s in statuses.values() if s != "not checked"]
    before = [s for m in sample for s in load(m, recorded, stale=True)[0].values()]
    if not run:
        print("mutation sample: no mutant ran within the time given (not judged)")
        return True
    p = sum(s in KILLED for s in run) / len(run)
    bar = min(minimum, 100 * sum(s in KILLED for s in before) / len(before) if before else minimum)
    allowed = bar - 200 * (p * (1 - p) / len(run)) ** 0.5
    print(
        f"mutation sample: {100 * p:.1f}% of {len(run)} mutants killed; bar {bar:.1f}% "
        f"(recorded before the change, at most {minimum:.0f}%), failing below {allowed:.1f}%"
    )
    return 100 * p >= allowed


def parse(lines: list[str]) -> dict[str, dict[str, str]]:
    """mutmut's `NAME: STATUS` lines, by module."""
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for line in lines:
        name, sep, status = line.strip().rpartition(": ")
        m = NAME.match(name)
        if sep and m:
            by_module[m["module"]][name] = status
    return by_module


def accounted() -> dict[str, str]:
    """REASONS: why a survivor is left (`NAME<TAB>SOURCE<TAB>kind: reason`, written by `reason`;
    kind: equivalent, unreachable, outside), each valid while its module's source is SOURCE (the
    first 12 digits of its blob hash): after a change the name is another mutant's."""
    if not REASONS.exists():
        return {}
    rows = [line.split("\t", 2) for line in REASONS.read_text().splitlines() if line and not line.startswith("#")]
    current = {m: blob_hash(source_of(m))[:12] for m in {NAME.match(n)["module"] for n, _, _ in rows}}  # type: ignore[index]
    return {name: reason for name, source, reason in rows if current[NAME.match(name)["module"]] == source}  # type: ignore[index]


def add_reason(names: list[str], reason: str) -> None:
    """Appends NAMES with REASON to REASONS."""
    assert re.match(r"(equivalent|unreachable|outside): ", reason), "kind: equivalent, unreachable or outside"
    lines = []
    for name in names:
        m = NAME.match(name)
        assert m, name
        lines.append(f"{name}\t{blob_hash(source_of(m['module']))[:12]}\t{reason}\n")
    with REASONS.open("a") as fh:
        fh.write("".join(lines))


def stored_modules() -> list[str]:
    return sorted(p.stem for p in STORE.glob("*.txt"))


def row(label: str, c: Counter[str], not_run: int) -> str:
    total = sum(c[k] for k in COLUMNS)
    score = f"{100 * c['killed'] / total:6.1f}%" if total else "      -"
    counts = " ".join(f"{c[k]:>8}" for k in COLUMNS[1:])
    return f"{label:40} {c['killed']:>6} / {total:<6} {score}  {counts} {not_run:>8}"


def report(modules: dict[str, tuple[dict[str, str], int | None]]) -> list[str]:
    """Prints the score per package and module; returns the survivors' names."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    not_run: Counter[str] = Counter()
    for module, (statuses, total) in modules.items():
        for key in {package(module), module, "overall"}:  # a package of one module: once
            for status in statuses.values():
                status = "killed" if status in KILLED else status
                counts[key][status if status in COLUMNS else "other"] += 1
            not_run[key] += (total or 0) - len(statuses)
    header = " ".join(f"{c:>8}" for c in (*COLUMNS[1:], "not run"))
    print(f"{'package / module':40} {'killed / run':>15} {'score':>7}  {header}")
    for pkg in (*PACKAGES, "other", "overall"):
        if pkg == "other" and not counts[pkg] and not not_run[pkg]:
            continue
        print(row(pkg, counts[pkg], not_run[pkg]))
        for mod in sorted(m for m in modules if package(m) == pkg and m != pkg and modules[m][1]):
            print(row("  " + mod.removeprefix(pkg + "."), counts[mod], not_run[mod]))
    return sorted(n for s, _ in modules.values() for n, st in s.items() if st == "survived")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "score"
    if command == "changed":
        print("".join(f"{m}\n" for m in changed()), end="")
        return
    if command == "tests":
        print(" ".join(sorted({f"tests/{t.removeprefix('tests/')}" for m in sys.argv[2:] for t in reaching_tests(m)})))
        return
    if command == "reason":
        add_reason(sys.argv[3:], sys.argv[2])
        return
    if command == "narrow":
        narrow(Path(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split())
        return
    if command == "gate":
        sys.exit(0 if gate(parse(sys.stdin.read().splitlines()), Path(sys.argv[2])) else 1)
    if command == "merge":
        listed = parse(sys.stdin.read().splitlines())
        for module in core_modules():  # mutated by mutmut, with no mutant: recorded as such
            meta = ROOT / "mutants" / source_of(module).relative_to(ROOT).with_suffix(".py.meta")
            if module not in listed and meta.exists():
                listed[module] = {}
        for module, statuses in listed.items():
            if not mutated_as_it_is(module):  # results of the old source, under the new one's hash
                print(f"{module}: changed since mutants/ was made: not kept, run it again", file=sys.stderr)
                continue
            stored, _ = load(module)
            stored.update({n: s for n, s in statuses.items() if s != "not checked"})
            save(module, stored, len(statuses), reaching_tests(module))  # none run: the count
    modules = {m: load(m) for m in stored_modules()}
    if command == "done":  # "no tests" and "timeout" are no verdict: a wider selection may reach
        # the mutant, a longer limit may see its tests end (a loop the mutant made endless)
        names = (n for statuses, _ in modules.values() for n, s in statuses.items() if s not in ("no tests", "timeout"))
        print("".join(f"{name}\n" for name in names), end="")
        return
    stale = [m for m, (_, total) in modules.items() if total is None]
    survivors = report({m: v for m, v in modules.items() if v[1] is not None})
    reasons = accounted()
    print(f"{sum(s in reasons for s in survivors)} of {len(survivors)} survivors accounted for in {REASONS.name}")
    survivors = [s for s in survivors if s not in reasons]
    if stale:
        print(f"stale (the source changed since the run; run again): {' '.join(stale)}")
    if (ROOT / "mutants").is_dir():
        (ROOT / "mutants" / "survivors.txt").write_text("".join(f"{s}\n" for s in survivors))
        print(f"{len(survivors)} survivors not accounted for listed in mutants/survivors.txt")


if __name__ == "__main__":
    main()
