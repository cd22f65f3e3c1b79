"""scripts/mutation_score.py (#49): the mutation results kept in tests/mutation/, merged across
runs, and CI's sample — which modules of the core changed since their run, the copy's narrowed
[tool.mutmut], and the gate on the sample's score. mutmut itself is not run here (minutes)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def score(tmp_path, monkeypatch):
    """The script as a module, its repository a copy with one core module, x.py in dots.scoring."""
    spec = importlib.util.spec_from_file_location("mutation_score", REPO / "scripts" / "mutation_score.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "dots" / "scoring").mkdir(parents=True)
    (tmp_path / "dots" / "scoring" / "x.py").write_text("def f(a):\n    return a + 1\n")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "STORE", tmp_path / "tests" / "mutation")
    monkeypatch.setattr(module, "REASONS", tmp_path / "tests" / "mutation" / "reasons.tsv")
    return module


def listing(statuses: dict[int, str], function: str = "x_f") -> list[str]:
    return [f"    dots.scoring.x.{function}__mutmut_{n}: {s}" for n, s in statuses.items()]


def merge(score, lines: list[str]) -> dict[str, str]:
    for module, statuses in score.parse(lines).items():
        stored, _ = score.load(module)
        stored.update({n: s for n, s in statuses.items() if s != "not checked"})
        score.save(module, stored, len(statuses), {"tests/test_x.py"})
    return score.load("dots.scoring.x")[0]


def test_a_later_run_replaces_the_statuses_it_ran_and_keeps_the_others(score):
    merge(score, listing({1: "killed", 2: "survived", 3: "not checked", 4: "killed"}))
    stored = merge(score, listing({1: "not checked", 2: "killed", 3: "survived", 4: "not checked"}))
    assert stored == {
        f"dots.scoring.x.x_f__mutmut_{n}": s for n, s in {1: "killed", 2: "killed", 3: "survived", 4: "killed"}.items()
    }
    text = (score.STORE / "dots.scoring.x.txt").read_text().splitlines()
    assert text[1:] == ["killed\tx_f\t1-2,4", "survived\tx_f\t3"]  # ranges, one line a status and function
    assert "mutants=4" in text[0] and "tests=tests/test_x.py" in text[0]


def test_results_of_another_source_are_not_counted_and_the_module_is_listed_as_changed(score):
    merge(score, listing({1: "killed", 2: "survived"}))
    assert score.changed() == [] and score.load("dots.scoring.x")[1] == 2
    (score.ROOT / "dots" / "scoring" / "x.py").write_text("def f(a):\n    return a - 1\n")
    assert score.changed() == ["dots.scoring.x"]
    assert score.load("dots.scoring.x") == ({}, None)  # its mutants are other mutants now
    assert len(score.load("dots.scoring.x", stale=True)[0]) == 2  # the gate's "before"
    (score.ROOT / "dots" / "scoring" / "y.py").write_text("def g():\n    return 0\n")  # never run
    assert score.changed() == ["dots.scoring.x", "dots.scoring.y"]


def test_a_survivors_reason_holds_only_for_the_source_it_was_given_on(score):
    merge(score, listing({1: "survived", 2: "survived"}))
    score.add_reason(["dots.scoring.x.x_f__mutmut_2"], "equivalent: the same sum")
    assert score.accounted() == {"dots.scoring.x.x_f__mutmut_2": "equivalent: the same sum"}
    with pytest.raises(AssertionError, match="kind"):
        score.add_reason(["dots.scoring.x.x_f__mutmut_1"], "looks fine")
    (score.ROOT / "dots" / "scoring" / "x.py").write_text("def f(a):\n    return a * 2\n")
    assert score.accounted() == {}  # mutant 2 of the new source is another mutant


def test_the_ranges_round_trip():
    spec = importlib.util.spec_from_file_location("ms", REPO / "scripts" / "mutation_score.py")
    ms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ms)
    for numbers in ([1], [1, 2, 3, 7, 9, 10], [5, 3, 4, 12]):
        assert ms.numbers(ms.ranges(numbers)) == sorted(numbers)


def test_the_gate_allows_two_standard_errors_below_the_lower_of_90_and_the_recorded_score(score, capsys):
    merge(score, listing({n: "killed" if n <= 19 else "survived" for n in range(1, 21)}))  # 95% before
    recorded = score.STORE
    # 100 mutants: p = 0.85, two standard errors = 2 * sqrt(.85 * .15 / 100) = 7.14 points: bar 90 - 7.14
    sample = {n: "killed" if n <= 85 else "survived" for n in range(1, 101)}
    assert score.gate(score.parse(listing(sample)), recorded)
    sample = {n: "killed" if n <= 80 else "survived" for n in range(1, 101)}  # 80 < 90 - 8.0
    assert not score.gate(score.parse(listing(sample)), recorded)
    assert "failing below 82.0%" in capsys.readouterr().out
    # a module that scored 70% before the change is held to 70%, not 90%
    merge(score, listing({n: "killed" if n <= 14 else "survived" for n in range(1, 21)}))
    sample = {n: "killed" if n <= 65 else "survived" for n in range(1, 101)}  # 70 - 9.5 < 65
    assert score.gate(score.parse(listing(sample)), recorded)
    assert score.gate(score.parse(listing({1: "not checked"})), recorded)  # nothing ran: not judged


def test_the_copy_mutates_only_the_changed_modules_with_their_tests(score, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text())
    score.narrow(pyproject, ["dots.scoring.x"], ["tests/test_a.py", "tests/test_b.py"])
    mutmut = tomllib.loads(pyproject.read_text())["tool"]["mutmut"]
    assert mutmut["only_mutate"] == ["dots/scoring/x.py"]
    selection = mutmut["pytest_add_cli_args_test_selection"]
    assert selection[:2] == ["tests/test_a.py", "tests/test_b.py"] and selection[2] == "-k"
    original = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert selection[2:] == [a for a in original["pytest_add_cli_args_test_selection"] if not a.startswith("tests/")]


def test_the_source_hash_is_gits_and_the_core_is_the_configured_one():
    spec = importlib.util.spec_from_file_location("ms2", REPO / "scripts" / "mutation_score.py")
    ms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ms)
    path = REPO / "dots" / "scoring" / "extract.py"
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
    assert ms.blob_hash(path) == git.stdout.strip()
    only_mutate = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    assert sorted(p.rstrip("/*").replace("/", ".").removesuffix(".py") for p in only_mutate) == sorted(ms.PACKAGES)
    assert {"dots.scoring.extract", "dots.search.pick.pareto", "dots.engines.canary"} <= set(ms.core_modules())


def test_results_are_kept_only_for_a_module_whose_mutants_are_of_its_current_source(score):
    """mutmut writes a module's mutants after copying it into mutants/: a source edited since (newer
    than that copy) has results of its old source, which the store must not file under the new one."""
    source = score.ROOT / "dots" / "scoring" / "x.py"
    mutated = score.ROOT / "mutants" / "dots" / "scoring" / "x.py"
    mutated.parent.mkdir(parents=True)
    mutated.write_text("# x.py's mutants\n")
    os.utime(source, (1000, 1000))
    os.utime(mutated, (1000, 1000))
    assert score.mutated_as_it_is("dots.scoring.x")  # copied, not mutated yet
    os.utime(mutated, (2000, 2000))
    assert score.mutated_as_it_is("dots.scoring.x")
    os.utime(source, (3000, 3000))  # edited after mutmut made the mutants
    assert not score.mutated_as_it_is("dots.scoring.x")
