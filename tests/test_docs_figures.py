"""The figures README.md and docs/ state, compared with what their commands print or the records
those commands wrote — each test fails when a stated number is edited to another value.

Run here (cheap, deterministic): the search's pick line, drawn from the README run's committed
result.yaml by the function the search prints it with; what `dots lab --rebuild` announces before
it trains, and the shipped stages' seconds and rewards; `dots analyze` on the shipped trio (~15 s);
`dots plan` for docs/search.md's memory table; the two redraw commands of docs/lab.md's pictures.
Checked against a committed record instead of a run (too slow for CI here): docs/lab.md's table
of every baseline (a 1,024-problem evaluation of 12 models, 8.6 min here on 2 cores) against
`docs/figures/lab/methods-scores.json`, the scores.json that `bash benchmarks/pick/methods.sh` wrote;
its base, SFT, RLVR and pick rows are also compared with `dots lab --model` by
tests/test_docs_commands.py. Not checked: the benchmark studies' tables (minutes to hours of
`python -m benchmarks.pick ...`; each section of docs/lab.md names its command, machine and date)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "figures" / "lab"
RUN = FIGURES / "landscape-run"  # the README run's trials.csv and result.yaml


def text(name: str) -> str:
    """A doc's text with its line breaks folded into spaces (a figure may be split over two lines)."""
    return " ".join((REPO / name).read_text().split())


def stated(doc: str, pattern: str) -> tuple[str, ...]:
    match = re.search(pattern, text(doc))
    assert match, f"{doc} no longer states {pattern!r}"
    return match.groups()


def test_the_pick_figures_are_the_pick_line_of_the_recorded_run():
    """README, docs/performance.md and docs/lab.md: the run's trial, λ, C, PPL, confirmed C with its
    interval, and where it stopped — as the search prints them (`pick_line`, the stop reason) from
    the result.yaml it wrote (docs/figures/lab/landscape-run)."""
    from dots.search.pick.report import pick_line

    result = yaml.safe_load((RUN / "result.yaml").read_text())
    line = pick_line(result, result["pick"])
    m = re.fullmatch(
        r"pick \(smoothed, confirmed\): trial (\d+), λ sft=(\S+), rlvr=(\S+); C (\S+), PPL (\S+); "
        r"confirmed C (\S+), 95% interval (\S+)–(\S+) over (\d+) queries",
        line,
    )
    assert m, line
    trial, sft, rlvr, c, ppl, confirmed, low, high, queries = m.groups()
    assert stated("README.md", r"confirmed C (\S+), 95% interval (\S+)–(\S+) over (\d+) queries") == (
        confirmed, low, high, queries)  # fmt: skip
    assert stated("README.md", r"with λ = \(SFT (\S+), RLVR (\S+)\), which scores") == (sft, rlvr)
    performance = r"picked trial (\d+), λ = \(SFT (\S+), RLVR (\S+)\), C (\S+) \((\S+) confirmed\), PPL (\S+):"
    assert stated("docs/performance.md", performance) == (trial, sft, rlvr, c, confirmed, ppl)
    assert line in text("docs/lab.md"), "docs/lab.md no longer quotes the pick line"
    stop = result["stopped"]["reason"]  # "search stopped after 24 scored trials: the last 10 added 0.36% …"
    n, window, gain = re.search(r"after (\d+) scored trials: the last (\d+) added (\S+)%", stop).groups()
    assert stated("docs/performance.md", r"stopped after (\d+) trials \(the last (\d+) added (\S+)% of the") == (
        n, window, gain)  # fmt: skip
    assert stated("README.md", r"after (\d+) of its 50 trials") == (n,)


def test_the_rebuild_announcement_and_the_shipped_stages_seconds(tmp_path, monkeypatch):
    """docs/lab.md: `dots lab --rebuild` says first how long the shipped build took (the sum of the
    stages' `seconds`, in min); the three stages' seconds and GRPO's first and last reward are those
    of the shipped dots/data/lab/*/lab.json (the records the build wrote)."""
    from dots.lab.__main__ import where_line
    from dots.lab.config import load_config

    monkeypatch.setenv("DOTS_OUTPUTS", str(tmp_path))  # nothing built here: every stage would be trained
    said = where_line(load_config([]), rebuild=True)
    minutes = re.search(r"these took (\d+) min on an idle 2-core VM", said).group(1)
    assert stated("docs/lab.md", r"\(it says first: (\d+) min on an idle 2-core VM\)") == (minutes,)
    assert stated("docs/lab.md", r'\("these took (\d+) min on an idle 2-core VM"\)') == (minutes,)
    seconds = {
        p.parent.name.split("-")[0]: json.loads(p.read_text())["seconds"]
        for p in (REPO / "dots" / "data" / "lab").glob("*/lab.json")
    }
    shown = stated("docs/lab.md", r"The shipped trio's stages took base (\S+) s, SFT (\S+) s, RLVR (\S+) s")
    assert shown == tuple(f"{seconds[s]:.1f}" for s in ("base", "sft", "rlvr"))
    rlvr = json.loads(next((REPO / "dots" / "data" / "lab").glob("rlvr-*/lab.json")).read_text())["metrics"]
    reward = (
        r"GRPO sees (\S+)% reward at T = 1 on its first step \(`reward_first` in the shipped \S+; (\S+)% on its last\)"
    )
    assert stated("docs/lab.md", reward) == (f"{100 * rlvr['reward_first']:.1f}", f"{100 * rlvr['reward_last']:.1f}")


def methods_table() -> dict[str, tuple[float, float]]:
    """docs/lab.md's table of every baseline: model → (A∪B greedy in %, its standard error)."""
    section = (REPO / "docs" / "lab.md").read_text().split("## The search and every baseline", 1)[1]
    rows = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"\d+\.\d", cells[2]):  # model | what | score | se
            rows[cells[0]] = (float(cells[2]), float(cells[3]))
    return rows


def test_the_baselines_table_is_the_recorded_evaluation():
    """docs/lab.md's table of every baseline: each model's score and standard error in % as
    `dots evaluate` printed them (one decimal), from the scores.json that `bash
    benchmarks/pick/methods.sh` wrote (committed as docs/figures/lab/methods-scores.json); the
    command is shown beside it, with lab_greedy and the float32 transformers engine."""
    record = json.loads((FIGURES / "methods-scores.json").read_text())
    assert list(record["benchmarks"]) == ["lab_greedy"] and record["benchmarks"]["lab_greedy"]["problems"] == 1024
    printed = {
        name: (round(100 * s["lab_greedy"]["score"], 1), round(100 * s["lab_greedy"]["stderr"], 1))
        for name, s in record["scores"].items()
    }
    assert methods_table() == printed
    command = "bash benchmarks/pick/methods.sh docs/figures/lab/landscape-run 'benchmarks=[lab_greedy]' engine=hf"
    assert command in text("docs/lab.md")


@pytest.mark.parametrize(
    "module,source,picture",
    [
        ("dots.evaluate.report", FIGURES / "methods-scores.json", "scores.png"),
        ("dots.search.pick.pareto", RUN, "pareto.png"),
    ],
)
def test_each_picture_of_lab_md_is_redrawn_by_the_command_shown_beside_it(module, source, picture, tmp_path):
    """docs/lab.md shows `python -m MODULE SOURCE OUT.png` for each of its pictures; run on a copy of the
    record it draws a PNG of about the committed picture's size (the committed one is small)."""
    shown = f"python -m {module} {source.relative_to(REPO)} docs/figures/lab/{picture}"
    assert shown in text("docs/lab.md")
    copy = tmp_path / source.name
    (shutil.copytree if source.is_dir() else shutil.copy)(source, copy)
    out = tmp_path / picture
    done = subprocess.run([sys.executable, "-m", module, str(copy), str(out)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    committed = (FIGURES / picture).stat().st_size
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and committed < 120_000
    assert 0.5 < out.stat().st_size / committed < 2


def test_the_anatomy_figures_are_what_dots_analyze_prints_and_records(tmp_path):
    """docs/lab.md's anatomy of the task vectors: `python -m dots.analyze` on the shipped trio (seconds)
    prints the norm ratio, each source's unchanged share and the sign conflict in the text's units,
    and its analysis.json holds the overlap, the SAR regions and the LM head's top-10% share."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOTS_OUTPUTS": str(tmp_path), "DOTS_PROGRESS": "0"}
    done = subprocess.run([sys.executable, "-m", "dots.analyze"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = re.search(
        r"sft: ‖τ‖ \S+, (\S+)% of entries unchanged; rlvr: ‖τ‖ \S+, (\S+)% of entries unchanged; "
        r"norm ratio (\S+); sign conflict (\S+)%",
        done.stdout,
    )
    assert printed, done.stdout
    sft, rlvr, ratio, conflict = printed.groups()
    assert stated("docs/lab.md", r"\| unchanged share \(\|τ\| ≤ 1e-5\) per layer and module: RLVR (\S+)% overall, "
                                 r"all of the norms, \S+ of the LM head; SFT (\S+)% \|") == (rlvr, sft)  # fmt: skip
    assert stated("docs/lab.md", r"SFT 28–34× RLVR in the two layers; (\S+)× overall") == (ratio,)
    assert stated("docs/lab.md", r"(\S+)% of the entries both change disagree") == (conflict,)
    record = json.loads((tmp_path / "analyze" / "lab" / "analysis.json").read_text())
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    regions = record["pairs"]["sft|rlvr"]["regions"]
    sar = r"SAR regions: conflict (\S+)%, agree (\S+)%, private (\S+)%, unchanged (\S+)%"
    assert stated("docs/lab.md", sar) == tuple(pct(regions[k]) for k in ("conflict", "agree", "private", "unchanged"))
    unique = record["overlap"]["sources"]
    assert stated("docs/lab.md", r"RAM's overlap: (\S+)% of RLVR's changed entries are also changed by SFT; "
                                 r"(\S+)% of SFT's are SFT's alone") == (
        pct(1 - unique["rlvr"]["unique_share"]), pct(unique["sft"]["unique_share"]))  # fmt: skip
    share = record["module_activation"]["share_of_module"]
    assert stated("docs/lab.md", r"SFT's in the LM head \((\S+)% of it\)") == (pct(share["sft"]["lm_head"]),)
    assert stated("docs/lab.md", r"attention and MLP \((\S+)% / (\S+)%,") == (
        pct(share["rlvr"]["attention"]), pct(share["rlvr"]["mlp"]))  # fmt: skip


def test_the_memory_plan_table_is_what_dots_plan_prints():
    """docs/search.md's memory plan table: each column is `python -m dots.plan` with the shapes file
    and options shown above it (a config.json alone, no model), in GB as the plan prints them."""
    commands = {
        "qwen7b": ["--shapes", "benchmarks/shapes/qwen2.5-7b.json", "--device-memory-gb", "80", "backbone=qwen7b",
                   "engine=vllm"],
        "llama70b": ["--shapes", "benchmarks/shapes/llama-3-70b.json", "--device-memory-gb", "80", "backbone=qwen7b",
                     "engine=vllm", "engine.tensor_parallel_size=8"],
    }  # fmt: skip
    doc = text("docs/search.md")
    for words in commands.values():
        assert " ".join(["python -m dots.plan", *words[:4], "backbone=qwen7b"]) in doc.replace("\\ ", "")
    rows = {}
    for line in (REPO / "docs" / "search.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in (
            "engine weights",
            "engine KV cache (minimum)",
            "reserve",
            "τ̃ resident (this worker's shard)",
            "τ̃ from the cache",
            "choice",
        ):
            rows[cells[0]] = cells[1:]  # fmt: skip
    assert len(rows) == 6
    env = {**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0"}
    for column, words in enumerate(commands.values()):
        out = subprocess.run([sys.executable, "-m", "dots.plan", *words], cwd=REPO, capture_output=True, text=True,
                             env=env).stdout  # fmt: skip
        gb = {
            k: re.search(rf"{k}\s+(\S+) GB", out).group(1) for k in ("weights", "KV cache", "reserve", "from the cache")
        }
        resident = re.search(r"τ̃ resident\s+(\S+) GB  bitmask form: θ0 (\S+) GB \+ 2 τ̃ (\S+) GB \+ set-up or swap "
                             r"buffers (\S+) GB", out).groups()  # fmt: skip
        share = re.search(r"gpu_memory_utilization (\S+):", out).group(1)
        assert rows["engine weights"][column] == f"{gb['weights']} GB"
        assert rows["engine KV cache (minimum)"][column] == f"{gb['KV cache']} GB"
        assert rows["reserve"][column] == f"{gb['reserve']} GB"
        assert rows["τ̃ from the cache"][column] == f"{gb['from the cache']} GB"
        assert re.findall(r"\d+\.\d\d", rows["τ̃ resident (this worker's shard)"][column]) == list(resident)
        assert re.search(r"vLLM (?:gets )?(\S+)", rows["choice"][column]).group(1) == share
