"""Evaluation (docs/method.md §7): metrics on hand-made outputs, benchmark loaders, resume, engine swaps, CLI."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import bar_heights, capture_figures, legend_texts

from dots.errors import DotsError
from dots.evaluate.benchmarks import Benchmark, choice_question, load_problems, resolve_benchmark
from dots.evaluate.live import swap_incompatibility
from dots.evaluate.metrics import aggregate, grade, parse_metric, pass_at_k, problem_score
from dots.evaluate.report import plot_scores
from dots.evaluate.run import evaluate
from dots.paths import DATA_DIR

REPO = Path(__file__).resolve().parent.parent
SHARED_PARQUET = DATA_DIR / "math" / "valid.all.dedup.parquet"  # the real verl parquet, shipped with dots
HF = {"name": "hf", "device": "cpu", "batch_size": 8}


# --- metrics on hand-made outputs ------------------------------------------------------------


def test_math_grading_uses_equivalence_and_the_last_box():
    completions = [
        "so x = 1/2, hence \\boxed{\\frac{1}{2}}",
        "first \\boxed{3}, corrected: \\boxed{0.5}",  # the last box counts
        "\\boxed{2}",
        "I give up",  # no answer
    ]
    answers, correct = grade(completions, "\\frac12", "math")
    assert answers == ["\\frac{1}{2}", "0.5", "2", None]
    assert correct == [True, True, False, False]


def test_avg_at_k_on_hand_made_outputs():
    metric = parse_metric("avg@4")
    problems = {  # gold → 4 completions
        "7": ["\\boxed{7}", "\\boxed{7}", "\\boxed{8}", "\\boxed{7}"],  # 3/4
        "x^2": ["\\boxed{x^{2}}", "no", "\\boxed{2x}", "\\boxed{x*x}"],  # 2/4 (x^{2}, x*x)
        "10": ["\\boxed{11}"] * 4,  # 0/4
    }
    scores = [problem_score(grade(c, gold)[1], metric) for gold, c in problems.items()]
    assert scores == [0.75, 0.5, 0.0]
    result = aggregate(scores)
    assert result["score"] == pytest.approx(1.25 / 3)
    assert result["problems"] == 3
    assert result["stderr"] == pytest.approx(
        math.sqrt(((0.75 - 1.25 / 3) ** 2 + (0.5 - 1.25 / 3) ** 2 + (1.25 / 3) ** 2) / 2 / 3)
    )
    with pytest.raises(ValueError):
        problem_score([True, False], metric)  # avg@4 needs 4 samples


def test_pass_at_1_on_hand_made_outputs():
    metric = parse_metric("pass@1")
    assert (metric.k, metric.n) == (1, 1)
    outputs = [("\\boxed{5}", "5"), ("The answer is 12.", "12"), ("\\boxed{4}", "5"), ("", "3")]
    scores = [problem_score(grade([c], gold)[1], metric) for c, gold in outputs]
    assert scores == [1.0, 1.0, 0.0, 0.0]
    assert aggregate(scores)["score"] == 0.5
    # pass@1 from 4 samples is the mean accuracy; pass@k is the unbiased estimator
    four = parse_metric("pass@1", samples=4)
    assert problem_score([True, False, False, True], four) == pytest.approx(0.5)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - math.comb(2, 2) / math.comb(4, 2))
    assert pass_at_k(4, 3, 2) == 1.0 and pass_at_k(4, 0, 3) == 0.0


def test_multiple_choice_grading_and_scoring():
    completions = ["<think>B or C?</think> The answer is (B).", "\\boxed{C}", "\\boxed{\\text{B}}", "maybe"]
    answers, correct = grade(completions, "B", "choice")
    assert answers == ["B", "C", "B", None]
    assert correct == [True, False, True, False]
    assert problem_score(correct, parse_metric("avg@4")) == 0.5


@pytest.mark.parametrize("bad", ["acc", "avg@0", "pass@", "maj@4"])
def test_bad_metric_is_a_dots_error(bad):
    with pytest.raises(DotsError, match="metric"):
        parse_metric(bad)


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(DotsError, match="at least 4"):
        parse_metric("pass@4", samples=2)


# --- benchmark definitions and loaders ----------------------------------------------------------


def test_parquet_loader_on_the_shared_math_file():
    context = {"math_parquet": str(SHARED_PARQUET), "backbone": {"max_tokens": 8192, "prompt": "dots_think"}}
    expected = {"aime24": 30, "aime25": 30, "amc": 83, "math500": 500, "minerva": 272, "olympiad": 675}
    seen = set()
    for name, size in expected.items():
        bench = resolve_benchmark(name, context, defaults={"max_tokens": 8192, "prompt": "dots_think"})
        problems = load_problems(bench)
        assert len(problems) == size, name
        assert len({p.id for p in problems}) == size
        assert all(p.answer and p.question for p in problems)
        assert not any("Your task is to follow" in p.question for p in problems)  # system prompt dropped
        seen |= {p.id for p in problems}
    assert len(seen) == 1590
    assert resolve_benchmark("aime24", context).metric == "avg@32"
    assert resolve_benchmark("math500", context).metric == "pass@1"
    # a seeded limit: the same subset each time, a different one for another seed
    limited = resolve_benchmark("math500", context, {"limit": 7})
    first, again = load_problems(limited), load_problems(limited)
    assert len(first) == 7 and [p.id for p in first] == [p.id for p in again]
    other = load_problems(resolve_benchmark("math500", context, {"limit": 7, "seed": 1}))
    assert {p.id for p in other} != {p.id for p in first}
    assert {p.id for p in first} <= {p.id for p in load_problems(resolve_benchmark("math500", context))}


def test_lab_benchmarks_are_the_lab_test_splits():
    from dots.lab.config import load_config
    from dots.lab.tasks import split_problems

    context = {"backbone": {"max_tokens": 16, "prompt": "plain", "test_set": {"lab_overrides": []}}}
    add = load_problems(resolve_benchmark("lab_add", context))
    sub = load_problems(resolve_benchmark("lab_sub", context))
    tasks = load_config([]).tasks
    assert [p.question for p in add] == [p.prompt for p in split_problems(tasks, "add")["test"]]
    assert [p.question for p in sub] == [p.prompt for p in split_problems(tasks, "sub")["test"]]
    assert all(int(p.answer) == eval(p.question[:-1]) for p in add[:50] + sub[:50])


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_multiple_choice_formats(tmp_path):
    arc = _write_jsonl(
        tmp_path / "arc.jsonl",
        [
            {
                "id": "q1",
                "question": "Sky colour?",
                "choices": {"text": ["red", "blue", "green"], "label": ["A", "B", "C"]},
                "answerKey": "B",
            },
            {"id": "q2", "question": "2+2?", "choices": {"text": ["3", "4"], "label": ["1", "2"]}, "answerKey": "2"},
        ],
    )
    gpqa = _write_jsonl(
        tmp_path / "gpqa.jsonl",
        [
            {
                "Record ID": f"r{i}",
                "Question": f"Q{i}",
                "Correct Answer": "right",
                "Incorrect Answer 1": "w1",
                "Incorrect Answer 2": "w2",
                "Incorrect Answer 3": "w3",
            }
            for i in range(12)
        ],
    )
    mmlu = _write_jsonl(
        tmp_path / "mmlu.jsonl",
        [
            {
                "question_id": 7,
                "question": "Pick",
                "options": ["a", "b", "c", "d", "e"],
                "answer": "D",
                "answer_index": 3,
                "category": "law",
            }
        ],
    )

    def load(path, fmt, **extra):
        entry = {
            "name": fmt,
            "data": {"kind": "jsonl", "path": str(path), "format": fmt, **extra},
            "mode": "choice",
            "max_tokens": 8,
        }
        return load_problems(resolve_benchmark(entry))

    q1, q2 = load(arc, "arc")
    assert q1.question == choice_question("Sky colour?", ["red", "blue", "green"]) and q1.answer == "B"
    assert "A. red\nB. blue\nC. green" in q1.question and q1.question.endswith("\\boxed{}.")
    assert q2.answer == "B"  # numeric labels map to positions
    problems = load(gpqa, "gpqa")
    for p in problems:  # the gold letter points at the correct answer wherever it was shuffled to
        line = next(ln for ln in p.question.splitlines() if ln.startswith(f"{p.answer}. "))
        assert line == f"{p.answer}. right"
    assert len({p.answer for p in problems}) > 1  # not always first
    assert [p.answer for p in problems] == [p.answer for p in load(gpqa, "gpqa")]  # seeded
    (m,) = load(mmlu, "mmlu_pro", source_key="category")
    assert m.answer == "D" and m.source == "law" and "E. e" in m.question


def test_bad_benchmark_input_is_a_dots_error(tmp_path):
    with pytest.raises(DotsError, match="unknown benchmark 'nope'.*aime24"):
        resolve_benchmark("nope")
    with pytest.raises(DotsError, match="does not exist"):
        load_problems(
            resolve_benchmark(
                {"name": "x", "data": {"kind": "jsonl", "path": str(tmp_path / "none.jsonl")}, "max_tokens": 4}
            )
        )
    with pytest.raises(DotsError, match="unknown field"):
        resolve_benchmark({"name": "x", "data": {"kind": "jsonl", "path": "a"}, "max_tokens": 4, "temprature": 1})
    with pytest.raises(DotsError, match="data kind"):
        resolve_benchmark({"name": "x", "data": {"kind": "csv"}, "max_tokens": 4})
    with pytest.raises(DotsError, match="max_tokens"):
        resolve_benchmark({"name": "x", "data": {"kind": "jsonl", "path": "a"}})
    no_gold = _write_jsonl(tmp_path / "nogold.jsonl", [{"question": "1+1="}])
    with pytest.raises(DotsError, match="no gold answer"):
        load_problems(
            resolve_benchmark({"name": "x", "data": {"kind": "jsonl", "path": str(no_gold)}, "max_tokens": 4})
        )


# --- runs on tiny real models ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(trio, checkpoints, tmp_path_factory):
    """The trio's base and sft, a base of other weights and one of another architecture, a benchmark."""
    root = tmp_path_factory.mktemp("eval")
    base, sft = trio.base, trio.sources["sft"]
    # copies named as the engine log (_counting_factory) names a model: by its directory
    other = Path(shutil.copytree(checkpoints({"seed": 3}).base, root / "other"))  # same shapes, other weights
    llama = Path(shutil.copytree(checkpoints({"arch": "llama", "seed": 4}).base, root / "llama"))  # another arch
    data = _write_jsonl(
        root / "tiny.jsonl",
        [
            {"id": i, "question": f"{a}+{b}=", "answer": str(a + b)}
            for i, (a, b) in enumerate([(1, 2), (3, 4), (5, 6), (7, 1), (2, 2)])
        ],
    )
    return {"root": root, "base": base, "sft": sft, "other": other, "llama": llama, "data": data}


def _bench(tiny, **kw) -> Benchmark:
    entry = {
        "name": "tiny",
        "data": {"kind": "jsonl", "path": str(tiny["data"])},
        "metric": "avg@2",
        "max_tokens": 4,
        "prompt": "plain",
        **kw,
    }
    return resolve_benchmark(entry)


class Counting:
    """A real engine with its generate calls counted (delegates everything)."""

    calls: list[int]

    def __init__(self, engine, log):
        self._engine, self._log = engine, log

    def generate(self, prompts, sampling):
        self._log.append(len(prompts))
        return self._engine.generate(prompts, sampling)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def _counting_factory(log: list, starts: list):
    from dots.engines.factory import build_engine

    def factory(cfg, path):
        starts.append(Path(path).name)
        return Counting(build_engine(cfg, path), log)

    return factory


def test_resume_does_not_regenerate(tiny, tmp_path):
    bench = _bench(tiny)
    models = {"base": tiny["base"], "sft": tiny["sft"]}
    calls, starts = [], []
    first = evaluate(
        models, [bench], tmp_path, HF, chunk=1, plot=False, engine_factory=_counting_factory(calls, starts)
    )
    assert sum(calls) == 10 and starts == ["base"]  # 5 problems × 2 models, one engine (sft swapped in)
    path = tmp_path / "samples" / "sft" / "tiny.jsonl"
    rows = path.read_text().splitlines()
    assert json.loads(rows[0])["header"]["problems"] == 5 and len(rows) == 6
    row = json.loads(rows[3])
    assert set(row) >= {"id", "completions", "answers", "correct", "score"} and len(row["completions"]) == 2

    calls.clear()
    second = evaluate(
        models, [bench], tmp_path, HF, chunk=1, plot=False, engine_factory=_counting_factory(calls, starts)
    )
    assert calls == [] and starts == ["base"]  # nothing generated, no engine started
    assert second["scores"] == first["scores"]

    # an interrupted run: the last problem missing and a torn line → only that problem is generated
    path.write_text("\n".join(rows[:-1]) + "\n" + rows[-1][: len(rows[-1]) // 2])
    third = evaluate(
        models, [bench], tmp_path, HF, chunk=1, plot=False, engine_factory=_counting_factory(calls, starts)
    )
    assert calls == [1]
    assert path.read_text().splitlines() == rows  # fixed chunk seeds: the same samples as the full run
    assert third["scores"] == first["scores"]

    # changed settings → recomputed
    calls.clear()
    evaluate(
        {"sft": tiny["sft"]},
        [_bench(tiny, temperature=1.0)],
        tmp_path,
        HF,
        chunk=5,
        plot=False,
        engine_factory=_counting_factory(calls, starts),
    )
    assert calls == [5]


def test_swapped_model_scores_like_a_fresh_engine(tiny, tmp_path):
    """Greedy completions of a model swapped into the live engine equal those of an engine started on it."""
    bench = _bench(tiny, metric="pass@1", temperature=0.0, max_tokens=6)
    calls, starts = [], []
    evaluate(
        {"base": tiny["base"], "other": tiny["other"], "llama": tiny["llama"]},
        [bench],
        tmp_path / "all",
        HF,
        plot=False,
        engine_factory=_counting_factory(calls, starts),
    )
    assert starts == ["base", "llama"]  # `other` swapped in; llama needs a new engine
    evaluate({"other": tiny["other"]}, [bench], tmp_path / "alone", HF, plot=False)

    def completions(d, model):
        return [
            json.loads(x)["completions"] for x in (d / "samples" / model / "tiny.jsonl").read_text().splitlines()[1:]
        ]

    swapped = completions(tmp_path / "all", "other")
    assert swapped == completions(tmp_path / "alone", "other")
    assert swapped != completions(tmp_path / "all", "base")  # the swap did change the weights


def test_swap_incompatibility_reasons(tiny):
    from dots.io.checkpoint import Checkpoint

    base = Checkpoint(tiny["base"])
    assert swap_incompatibility(base, Checkpoint(tiny["sft"])) is None
    assert "architectures differ" in swap_incompatibility(base, Checkpoint(tiny["llama"]))
    # another chat template or length limit does not matter to plain prompts; another stop token does
    import shutil

    copy = Path(shutil.copytree(tiny["sft"], tiny["root"] / "sft_copy", dirs_exist_ok=True))
    tok_cfg = json.loads((copy / "tokenizer_config.json").read_text())
    tok_cfg.update(chat_template="{{ messages }}", model_max_length=7)
    (copy / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    assert swap_incompatibility(base, Checkpoint(copy)) is None
    assert "tokenizer" in swap_incompatibility(base, Checkpoint(copy), chat_template=True)
    gen = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": 5}))
    assert "generation_config.json" in swap_incompatibility(base, Checkpoint(copy))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rope_theta": 123.0}))
    assert "rope_theta" in swap_incompatibility(base, Checkpoint(copy))


def test_cli_end_to_end(tiny, tmp_path, monkeypatch):
    bench_dir = tmp_path / "defs"
    bench_dir.mkdir()
    (bench_dir / "tiny.yaml").write_text(
        f"name: tiny\ndata:\n  kind: jsonl\n  path: {tiny['data']}\nmetric: avg@2\nmode: math\ntemperature: 0.6\n"
    )
    out = tmp_path / "out"
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    args = [
        sys.executable,
        "-m",
        "dots.evaluate",
        "include_backbone=false",
        f"+models.base={tiny['base']}",
        f"+models.sft={tiny['sft']}",
        "engine=hf",
        "engine.device=cpu",
        "benchmarks=[tiny]",
        f"benchmark_dirs=[{bench_dir}]",
        "limit=3",
        "max_tokens=4",
        f"output_dir={out}",
    ]
    run = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    scores = json.loads((out / "scores.json").read_text())
    assert list(scores["models"]) == ["base", "sft"] and scores["benchmarks"]["tiny"]["problems"] == 3
    assert set(scores["scores"]["sft"]["tiny"]) >= {"score", "stderr", "problems", "no_answer"}
    assert scores["engine_starts"] == 1
    table = (out / "scores.md").read_text()
    assert "| model | tiny (avg@2) | average |" in table and "| sft |" in table
    # scores.png: one bar per model at its score (%), the benchmark on the x axis, the models in the
    # legend; drawn again here from scores.json, byte for byte the CLI's file
    figures = capture_figures(monkeypatch)
    title = table.split("\n", 1)[0][2:] if table.startswith("# ") else ""
    plot_scores(scores, tmp_path / "again.png", title)
    assert (tmp_path / "again.png").read_bytes() == (out / "scores.png").read_bytes()
    ax = figures["again.png"].axes[0]
    assert bar_heights(ax) == pytest.approx([100 * scores["scores"][m]["tiny"]["score"] for m in ("base", "sft")])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["tiny"] and legend_texts(ax) == ["base", "sft"]
    for model in ("base", "sft"):
        rows = (out / "samples" / model / "tiny.jsonl").read_text().splitlines()
        assert len(rows) == 4 and len(json.loads(rows[1])["completions"]) == 2

    # bad input: one error line, exit 2, nothing written
    def run_bad(override: str) -> subprocess.CompletedProcess:
        cmd = args[:-1] + [override, f"output_dir={tmp_path / 'bad'}"]
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)

    bad = run_bad("benchmarks=[nope]")
    assert bad.returncode == 2 and "error: unknown benchmark 'nope'" in bad.stderr
    missing = run_bad(f"+models.gone={tmp_path / 'gone'}")
    assert missing.returncode == 2 and "error: model path does not exist" in missing.stderr
    assert not (tmp_path / "bad").exists()


def test_scores_figure_draws_each_models_scores_and_average(tmp_path, monkeypatch):
    """scores.png: per benchmark and for the average, one bar per model at its score in %."""
    figures = capture_figures(monkeypatch)
    report = {
        "benchmarks": {"aime": {}, "math": {}},
        "models": {"base": {}, "dots": {}},
        "scores": {"base": {"aime": {"score": 0.1}, "math": {"score": 0.5}}, "dots": {"aime": {"score": 0.2}}},
        "average": {"base": 0.3, "dots": None},
    }
    plot_scores(report, tmp_path / "scores.png", "t")
    ax = figures["scores.png"].axes[0]
    assert bar_heights(ax) == pytest.approx([10.0, 50.0, 30.0, 20.0, 0.0, 0.0])  # base's bars, then dots'
    assert [t.get_text() for t in ax.get_xticklabels()] == ["aime", "math", "average"]
    assert legend_texts(ax) == ["base", "dots"] and ax.get_title().startswith("t: aime")
    assert [t.get_text() for t in ax.texts] == ["10.0", "50.0", "30.0", "20.0", "0.0", "0.0"]  # bar labels
