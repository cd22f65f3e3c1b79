"""The DoTS pipeline end to end on tiny generated checkpoints (transformers engine): stages,
resume, the study's bookkeeping, one run per run directory, signals.

Searches on the lab backbone live in tests/test_search_vllm.py (vLLM), test_granularity.py
(λ per module group, to the export) and test_dashboard.py.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers import REPO, lab_scorer, overrides, run

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint


def test_pipeline_writes_every_stage_and_exports_the_pick(tiny, tmp_path):
    run_dir = run(overrides(tiny, tmp_path / "run"))
    for f in ("config.yaml", "selection.jsonl", "study.db", "trials.csv", "pareto.png", "result.yaml"):
        assert (run_dir / f).exists(), f
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert result["complete_trials"] == 3 and set(result["coefficients"]) == {"sft", "rlvr"}
    assert all(0.0 <= v <= 2.0 for v in result["coefficients"].values())
    rows = (run_dir / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("number,state,lambda_sft,lambda_rlvr,consistency,perplexity")
    assert "time_swap" in rows[0] and "time_generate" in rows[0] and len(rows) == 4
    import csv

    starts = [float(r["time_engine_start"]) for r in csv.DictReader(rows)]
    assert starts == [0.0, 0.0, 0.0]  # the selection stage started the engine
    # the export equals θ0 + Σ λ τ̃ computed directly, and loads in transformers
    from transformers import AutoModelForCausalLM

    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig
    from dots.vectors.synth import synthesize_dict

    root, base, srcs, _ = tiny
    tv = build_task_vectors(
        Checkpoint(base),
        {k: Checkpoint(srcs[k]) for k in ("sft", "rlvr")},
        SparsifyConfig(),
        root / "cache" / "taskvec",
    )
    expected = synthesize_dict(tv, result["coefficients"])
    exported = Checkpoint(run_dir / "model")
    for name, tensor in expected.items():
        assert torch.equal(exported.get(name), tensor), name
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    assert model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=3, do_sample=False).shape[1] == 6
    card = (run_dir / "model" / "README.md").read_text()
    assert "lambda" in card or "coefficients" in card
    assert (run_dir / "model" / "pareto.png").exists()


def test_rerun_skips_finished_stages_and_more_trials_extend(tiny, tmp_path):
    ovr = overrides(tiny, tmp_path / "run")
    run(ovr)
    db = tmp_path / "run" / "study.db"
    before = sqlite3.connect(db).execute("select number, datetime_complete from trials order by number").fetchall()
    sel_mtime = (tmp_path / "run" / "selection.jsonl").stat().st_mtime_ns
    run(ovr)
    assert (
        sqlite3.connect(db).execute("select number, datetime_complete from trials order by number").fetchall() == before
    )
    assert (tmp_path / "run" / "selection.jsonl").stat().st_mtime_ns == sel_mtime
    run(overrides(tiny, tmp_path / "run", trials=5))
    after = sqlite3.connect(db).execute("select number, datetime_complete from trials order by number").fetchall()
    assert after[:3] == before and len(after) == 5
    # selection cached: the first new trial starts the engine (its own column: how long is a benchmark's
    # question, benchmarks/search/restart.py), the next ones find it running
    import csv

    rows = list(csv.DictReader((tmp_path / "run" / "trials.csv").read_text().splitlines()))
    assert float(rows[3]["time_engine_start"]) > 0 and float(rows[4]["time_engine_start"]) == 0.0


def test_three_sources_get_one_coefficient_each(tiny, tmp_path):
    run_dir = run(overrides(tiny, tmp_path / "run", sources=("sft", "rlvr", "third"), trials=2))
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert set(result["coefficients"]) == {"sft", "rlvr", "third"}


@pytest.mark.parametrize("sampler", ["gp", "nsga2", "random"])
def test_every_sampler_runs_the_search(tiny, tmp_path, sampler):
    """(tpe, the default, runs in every other test here.)"""
    import optuna

    run_dir = run(
        overrides(
            tiny,
            tmp_path / "run",
            trials=4,
            extra=[f"sampler={sampler}", "sampler.population_size=2"] if sampler == "nsga2" else [f"sampler={sampler}"],
        )
    )
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert result["complete_trials"] == 4
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{run_dir / 'study.db'}")
    assert study.user_attrs["sampler"]["name"] == sampler
    lams = {tuple(t.params.values()) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    assert len(lams) == 4


def test_adaptive_sampling_draws_at_most_k_and_scores_what_it_drew(tiny, tmp_path):
    import optuna

    extra = ["search.k=6", "search.adaptive.enabled=true", "search.adaptive.first=2", "search.adaptive.step=2"]
    run_dir = run(overrides(tiny, tmp_path / "run", trials=3, extra=extra))
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{run_dir / 'study.db'}")
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        per_query = t.user_attrs["per_query_consistency"]
        assert len(per_query) == 3 and 3 * 2 <= t.user_attrs["samples_drawn"] <= 3 * 6
        assert t.values[0] == pytest.approx(sum(per_query) / 3)
        # Eq. 4 over n drawn samples takes values j/n with n in {2, 4, 6}
        assert all(any(abs(c * n - round(c * n)) < 1e-9 for n in (2, 4, 6)) for c in per_query)


def test_fixed_coefficients_are_scored_only(tiny, tmp_path):
    run_dir = run(overrides(tiny, tmp_path / "run", extra=["search.fixed=[[1,1],[0.5,0.5]]"]))
    rows = (run_dir / "fixed.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[1].split(",")[2:4] == ["1.0", "1.0"] and rows[2].split(",")[2:4] == ["0.5", "0.5"]
    assert not (run_dir / "model").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["search.range=[2.0,0.5]"], "inverted"),
        (["search.range=[-1.0,2.0]"], "negative"),
        (["search.storage=postgresql://nobody@127.0.0.1:1/none"], "storage"),
        (["backbone.base=/does/not/exist"], "does not exist"),
        (["search.fixed=[[1,1,1]]"], "coefficients"),
    ],
)
def test_bad_input_is_one_line_error(tiny, tmp_path, extra, message):
    with pytest.raises(DotsError, match=message):
        run(overrides(tiny, tmp_path / "run", extra=extra))


def test_empty_pool_and_everything_filtered(tiny, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DotsError, match="no query"):
        run(overrides(tiny, tmp_path / "run", extra=[f"pool.path={tmp_path / 'empty.jsonl'}"]))
    # random weights never answer: with the default threshold every query is dropped
    with pytest.raises(DotsError, match=r"every query was filtered: all 10 candidates .* D > 0\.500"):
        run(overrides(tiny, tmp_path / "run2", extra=["selection.threshold=null"]))


def test_cli_error_is_one_line_and_exit_code_2(tiny, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dots.search", *overrides(tiny, tmp_path / "r", extra=["search.range=[2,1]"])],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "DOTS_PROGRESS": "0"},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: search.range is inverted")
    assert not (tmp_path / "r" / "study.db").exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_resume_after_kill(tiny, tmp_path, sig):
    """kill -9 or SIGTERM mid-study, rerun: finished trials kept as they were, exactly N complete
    at the end. SIGTERM exits with 143 after closing the engine and queues the interrupted
    trial's coefficients again."""
    run_dir = tmp_path / "run"
    n = 8
    cmd = [sys.executable, "-m", "dots.search", *overrides(tiny, run_dir, trials=n)]
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = run_dir / "study.db"

    def complete():
        try:
            return (
                sqlite3.connect(db)
                .execute("select number, datetime_complete from trials where state='COMPLETE' order by number")
                .fetchall()
            )
        except sqlite3.Error:
            return []

    deadline = time.time() + 300
    while len(complete()) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == (-signal.SIGKILL if sig == signal.SIGKILL else 143)
    done = complete()
    assert 2 <= len(done) < n, "the kill should land mid-study"
    running = sqlite3.connect(db).execute("select count(*) from trials where state='RUNNING'").fetchone()[0]
    rerun = subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    said = [line for line in (rerun.stdout + rerun.stderr).splitlines() if "queued again" in line]
    assert len(said) == running, said  # a recovered trial is announced once (none after SIGTERM: it requeued)
    final = complete()
    assert len(final) == n
    assert final[: len(done)] == done  # finished trials untouched, not recomputed
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    assert result["complete_trials"] == n and (run_dir / "model" / "config.json").exists()
    if sig == signal.SIGTERM:  # a trial interrupted between its start and its end is redone
        import optuna

        study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
        failed = {t.number: t.params for t in study.trials if t.state.name == "FAIL"}
        retried = [t for t in study.trials if "dots_retry_of" in t.user_attrs]
        assert all(failed[t.user_attrs["dots_retry_of"]] == t.params for t in retried)
        assert len(retried) == len(failed) <= 1


def test_export_stage_looks_where_the_export_writes(tmp_path, monkeypatch):
    """A relative export.dir is written relative to the cwd; the export stage's 'done' check must
    look there, not under the run directory (else every rerun exports again)."""
    from types import SimpleNamespace

    from dots.options.search import ExportOptions
    from dots.search.steps import export_dir

    monkeypatch.chdir(tmp_path)
    run = SimpleNamespace(options=SimpleNamespace(export=ExportOptions(dir="rel/model")))
    assert tmp_path / "runs" / "r1" / export_dir(run) == tmp_path / "rel" / "model"
    run.options.export = ExportOptions(dir=None)
    assert tmp_path / "runs" / "r1" / export_dir(run) == tmp_path / "runs" / "r1" / "model"


def test_resumed_study_never_repeats_a_point(tiny, tmp_path):
    """kill -9 after 4 complete trials, rerun the same command: the seeded sampler must not start
    its sequence again, so every complete trial has its own coefficients."""
    run_dir = tmp_path / "run"
    n = 10
    cmd = [
        sys.executable,
        "-m",
        "dots.search",
        *overrides(tiny, run_dir, trials=n, extra=["search.n_startup_trials=10", "export.enabled=false"]),
    ]
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = run_dir / "study.db"

    def points(state="COMPLETE"):
        try:
            rows = (
                sqlite3.connect(db)
                .execute(
                    "select t.number, p.param_name, p.param_value from trials t join trial_params p "
                    "on t.trial_id = p.trial_id where t.state = ? order by t.number",
                    (state,),
                )
                .fetchall()
            )
        except sqlite3.Error:
            return {}
        out: dict = {}
        for number, name, value in rows:
            out.setdefault(number, {})[name] = value
        return out

    deadline = time.time() + 300
    while len(points()) < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=60)
    assert 4 <= len(points()) < n, "the kill should land mid-study"
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    complete = points()
    assert len(complete) == n
    distinct = {tuple(sorted(p.items())) for p in complete.values()}
    assert len(distinct) == len(complete), complete


def test_a_duplicate_proposal_is_set_aside_and_drawn_again():
    """A sampler that proposes a point already scored (a restarted seeded sequence) gets it back
    PRUNED and tagged; an enqueued retry of the same point is not a duplicate."""
    import optuna
    from optuna.trial import TrialState

    from dots.search.study.storage import sampler_seed
    from dots.search.study.trials import DUPLICATE_OF, set_aside_duplicate

    assert sampler_seed(3, 0, 0) == 3  # a fresh study keeps the configured sequence
    storage = optuna.storages.InMemoryStorage()
    names = ["lambda_a", "lambda_b"]
    first = optuna.create_study(study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    t = first.ask()
    point = {n: t.suggest_float(n, 0, 2) for n in names}
    assert not set_aside_duplicate(first, t, names)
    first.tell(t, 1.0)
    again = optuna.load_study(study_name="s", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    t = again.ask()
    assert {n: t.suggest_float(n, 0, 2) for n in names} == point
    assert set_aside_duplicate(again, t, names)
    pruned = again.trials[-1]
    assert pruned.state == TrialState.PRUNED and pruned.user_attrs[DUPLICATE_OF] == 0
    t = again.ask()
    assert {n: t.suggest_float(n, 0, 2) for n in names} != point  # the sampler was reseeded
    again.enqueue_trial(point)
    t = again.ask()
    assert {n: t.suggest_float(n, 0, 2) for n in names} == point and not set_aside_duplicate(again, t, names)


def test_a_sampler_stuck_on_a_scored_point_gets_a_random_point(tmp_path):
    """A sampler whose proposal does not change when reseeded (GPSampler with its acquisition
    optimum on a scored point) is not asked forever: after MAX_DUPLICATES repeats in a row a
    uniform random point is enqueued, and the study reaches its trial count. Scored by the
    search's real scorer on the shipped lab trio."""
    import optuna
    from optuna.samplers import BaseSampler

    from dots.search.study.trials import MAX_DUPLICATES, run_study

    class Stuck(BaseSampler):
        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_relative(self, study, trial, search_space):
            return {}

        def sample_independent(self, study, trial, name, distribution):
            return 0.0  # always the corner

        def reseed_rng(self):
            pass

    scorer = lab_scorer(tmp_path / "cache", k=2, queries=2)
    try:
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=Stuck())
        run_study(study, scorer, ["sft", "rlvr"], (0.0, 2.0), n_trials=3, seed=0)
    finally:
        scorer.engine.close()
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(complete) == 3 and len(pruned) == 2 * MAX_DUPLICATES
    assert complete[0].params == {"lambda_sft": 0.0, "lambda_rlvr": 0.0}
    assert len({tuple(t.params.values()) for t in complete}) == 3
    assert all(0 <= t.values[0] <= 1 and t.values[1] > 1 for t in complete)  # consistency, perplexity


def test_second_command_on_a_running_run_says_who_holds_it(tiny, tmp_path):
    """The same search started twice on one run directory: the second stops at once with one
    line naming the first's pid and host, and leaves the first's run alone."""
    import socket

    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "dots.search", *overrides(tiny, run_dir, trials=50, extra=["export.enabled=false"])]
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (run_dir / "config.yaml").exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert first.poll() is None, "the first search ended too early"
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        assert f"in use by pid {first.pid} on {socket.gethostname()}" in lines[0]
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()


def test_sigterm_before_the_first_trial_says_nothing_of_trials(tiny, tmp_path):
    """SIGTERM while the run prepares (no trial yet): exit 143, and the message does not promise
    finished trials that do not exist."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dots.search", *overrides(tiny, run_dir)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 300
    while not (run_dir / "config.yaml").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out
    trials = 0
    if (run_dir / "study.db").exists():
        trials = sqlite3.connect(run_dir / "study.db").execute("select count(*) from trials").fetchone()[0]
    assert trials == 0, "the signal should land before the first trial"
    assert "SIGTERM: stopping" in out and "trials are kept" not in out, out
