"""The pick's label-free warnings (dots/search/pick/diagnosis.py): next to the base model, or agreeing
with the sources less than they agree with each other — one line at the end of the search, in
result.yaml and on the exported card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dots.search.pick.diagnosis import NEAR_BASE, diagnose_pick, source_answers

REPO = Path(__file__).resolve().parent.parent


def test_a_pick_next_to_the_base_is_warned_about_and_one_away_is_not():
    near = diagnose_pick({"sft": NEAR_BASE, "rlvr": 0.04}, None, {}, range_low=0.0)
    assert len(near) == 1 and "next to the base model" in near[0] and "search.range=[0.5,2.0]" in near[0]
    # searched in the default range already (a per-module λ can still be near 0): no advice to use it
    inside = diagnose_pick({"sft": NEAR_BASE, "rlvr": 0.04}, None, {}, range_low=0.5)
    assert len(inside) == 1 and "search.range" not in inside[0] and "dots.evaluate" in inside[0]
    assert diagnose_pick({"sft": NEAR_BASE + 0.01, "rlvr": 0.0}, None, {}, range_low=0.0) == []
    per_module = {"sft": {"attention": 0.05, "mlp": 0.02}, "rlvr": {"attention": 0.3, "mlp": 0.0}}
    assert diagnose_pick(per_module, None, {}, range_low=0.0) == []  # one λ far from 0 moves the model


def test_a_pick_that_agrees_with_the_sources_less_than_they_agree_with_each_other_is_warned_about():
    sources = {
        "sft": {"a": "1", "b": "2", "c": "3", "d": "4"},
        "rlvr": {"a": "1", "b": "2", "c": "3", "d": "5"},
    }  # the sources agree on 3 of 4
    base_like = {"a": "7", "b": "2", "c": "9", "d": None}  # agrees with each on 1 of 4
    warned = diagnose_pick({"sft": 1.0, "rlvr": 1.0}, base_like, sources, range_low=0.0)
    assert len(warned) == 1 and "25% of the 4 selected queries" in warned[0] and "(75%)" in warned[0]
    assert "search.range=[0.5,2.0]" in warned[0]
    assert "search.range" not in diagnose_pick({"sft": 1.0, "rlvr": 1.0}, base_like, sources, range_low=0.5)[0]
    sound = {"a": "1", "b": "2", "c": "3", "d": "4"}  # sides with sft where they differ: 4/4 and 3/4
    assert diagnose_pick({"sft": 1.0, "rlvr": 1.0}, sound, sources, range_low=0.0) == []


def test_agreement_compares_answers_by_mathematical_equivalence():
    sources = {"sft": {"a": "0.5", "b": "2"}, "rlvr": {"a": "1/2", "b": "3"}}  # agree on a: 50%
    pick = {"a": r"\frac{1}{2}", "b": "2"}  # a with both, b with sft: 75%
    assert diagnose_pick({"sft": 1.0, "rlvr": 1.0}, pick, sources, range_low=0.0) == []
    assert diagnose_pick({"sft": 1.0, "rlvr": 1.0}, {"a": "0.4", "b": "5"}, sources, range_low=0.0) != []


@pytest.mark.slow
def test_a_search_forced_next_to_the_base_says_so_at_the_end_in_result_and_card(checkpoints, tmp_path):
    from helpers import overrides

    root = tmp_path
    family = checkpoints(sft={"seed": 1, "scale": 0.02}, rlvr={"seed": 2, "scale": 0.005})
    base, srcs = family.base, family.sources
    pool = root / "pool.jsonl"
    pool.write_text("\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(10)))
    run_dir = root / "run"
    ovr = overrides((root, base, srcs, pool), run_dir, extra=["search.range=[0.0,0.05]"])
    done = subprocess.run([sys.executable, "-m", "dots.search", *ovr], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("warning: the pick")]
    assert len(lines) == 1 and "next to the base model" in lines[0], done.stdout
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert any("next to the base model" in w for w in result["warnings"])
    card = (run_dir / "model" / "README.md").read_text()
    assert "**Warning:** the pick" in card and '"warnings"' in card
    # what the agreement check reads was recorded: each source's majority answer per query
    answers = source_answers(next(run_dir.glob("difficulty-*.jsonl")))
    assert set(answers) == {"sft", "rlvr"} and all(len(a) == 10 for a in answers.values())
