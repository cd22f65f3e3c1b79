"""Experiment tracking (`tracking=mlflow|wandb`, dots.search.study.tracking) against the real services: a
lab search through the CLI logged to a real MLflow tracking server started here, and to W&B in
offline mode, each read back and compared with the run's trials.csv and result.yaml; a resumed
search logs no trial twice; an unreachable server stops the search before anything is written."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import (
    SMALL_LAB,
    add_perfect_trial,
    cli_env,
    free_port,
    require_module,
    run_cli,
    wait_until_serving,
    wandb_records,
)

pytestmark = pytest.mark.slow


def need(module: str) -> None:
    """`module` importable (the test extra installs mlflow and wandb), else skipped — failed in CI."""
    require_module(module)


# pruning after every query, in a study that holds a perfect trial (C = 1, PPL = 1) before the search:
# every trial the search adds is dominated by it, so each is pruned after its first query on any
# machine (tests/test_pruning.py proves the bound; here it gives the trackers pruned trials to log)
PRUNING = ["search.prune=true", "search.batch=1"]


def pruning_study(run_dir: Path) -> list[str]:
    """The options of a search whose study (beside `run_dir`) holds a perfect trial already."""
    storage = f"sqlite:///{run_dir.parent / 'study.db'}"
    if not (run_dir.parent / "study.db").exists():
        add_perfect_trial(storage, "pruned")
    return [*PRUNING, f"search.storage={storage}", "search.study_name=pruned"]


def search(run_dir: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The smallest lab search (no export) through the CLI, into `run_dir`."""
    args = ["backbone=lab", *SMALL_LAB, "export.enabled=false", f"run_dir={run_dir}", *extra]
    return run_cli("dots.search", *args, cwd=run_dir.parent, env=env or cli_env(run_dir.parent / "outputs"))


def scored_rows(run_dir: Path) -> list[dict]:
    """trials.csv's scored trials (complete, or pruned by the bound: pruned_after_queries set) as
    the trackers log them: values as floats, empty cells left out, and pruned = 0 or 1."""
    rows = list(csv.DictReader((run_dir / "trials.csv").read_text().splitlines()))
    return [
        {**{k: float(v) for k, v in r.items() if v != "" and k != "state"}, "pruned": float(r["state"] == "PRUNED")}
        for r in rows
        if r["state"] == "COMPLETE" or r["pruned_after_queries"]
    ]


# --- MLflow -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """`mlflow server` on a free local port (SQLite store, artifacts served by it); its URI."""
    need("mlflow")
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    exe = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    server = subprocess.Popen(
        [exe, "server", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}", "--artifacts-destination",
         str(tmp / "artifacts"), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # (no job runner processes)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its uvicorn workers in its own process group, ended with it
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(uri + "/health", server, "mlflow server")
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def mlflow_options(uri: str, run_dir: Path) -> list[str]:
    """The search's options for the test server: experiment `lab`, every new trial pruned
    (`pruning_study`)."""
    return ["tracking=mlflow", f"tracking.uri={uri}", "tracking.experiment=lab", *pruning_study(run_dir)]


@pytest.fixture(scope="module")
def mlflow_run(mlflow_server, tmp_path_factory):
    """A lab search logged to the server: (run directory, URI)."""
    run_dir = tmp_path_factory.mktemp("mlflow-search") / "run"
    done = search(run_dir, *mlflow_options(mlflow_server, run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir, mlflow_server


def the_run(uri: str):
    """The one MLflow run of experiment `lab`, and the client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("lab").experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0]


def check_trials(client, run, run_dir: Path) -> None:
    """Each value of trials.csv's scored trials is a metric with one step per trial: its number;
    the trials the search added were pruned, and are logged as such."""
    rows = scored_rows(run_dir)
    added = [r for r in rows if r["number"] > 0]  # trial 0: the perfect one, there before the search
    assert added and all(r["pruned"] == 1.0 for r in added), rows
    keys = set().union(*rows) - {"number"}
    assert {"lambda_sft", "lambda_rlvr", "consistency", "perplexity", "tokens_generated", "time_generate"} <= keys
    for key in keys:
        history = client.get_metric_history(run.info.run_id, key)
        logged = {m.step: m.value for m in history}
        assert len(history) == len(logged), f"{key}: a step logged twice: {sorted(m.step for m in history)}"
        assert logged == {int(r["number"]): r[key] for r in rows if key in r}, key


def test_mlflow_run_holds_the_config_every_trial_the_pick_and_the_files(mlflow_run, tmp_path):
    run_dir, uri = mlflow_run
    client, run = the_run(uri)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert json.loads((run_dir / "tracking" / "mlflow.json").read_text()) == {f"{uri} lab": run.info.run_id}
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    params = run.data.params
    assert params["search.n_trials"] == "3" and params["backbone.name"] == "lab"
    assert params["tracking.name"] == "mlflow" and params["sparsify.density"] == str(config["sparsify"]["density"])
    assert params["search.range"] == str(config["search"]["range"])
    assert len(params) > 60  # every leaf of the resolved config
    check_trials(client, run, run_dir)
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    pick = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, f"pick/{k}")]
            for k in ("trial", "consistency", "perplexity", "lambda_sft", "lambda_rlvr")}  # fmt: skip
    assert pick == {
        "trial": [(3, result["trial"])],
        "consistency": [(3, result["objectives"]["consistency"])],
        "perplexity": [(3, result["objectives"]["perplexity"])],
        "lambda_sft": [(3, result["coefficients"]["sft"])],
        "lambda_rlvr": [(3, result["coefficients"]["rlvr"])],
    }
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "result.yaml", "trials.csv", "pareto.png", "landscape.png"} <= names
    for name in ("result.yaml", "pareto.png", "landscape.png"):  # downloaded over HTTP: the run's own files
        got = client.download_artifacts(run.info.run_id, name, str(tmp_path))
        assert Path(got).read_bytes() == (run_dir / name).read_bytes(), name


def test_mlflow_resumed_search_logs_only_the_new_trial(mlflow_run):
    run_dir, uri = mlflow_run
    done = search(run_dir, *mlflow_options(uri, run_dir), "search.n_trials=4")
    assert done.returncode == 0, done.stderr[-3000:]
    client, run = the_run(uri)  # the same MLflow run, reopened
    assert len(scored_rows(run_dir)) == 4
    check_trials(client, run, run_dir)  # trials 0–2 not again, trial 3 once
    picks = [m.step for m in client.get_metric_history(run.info.run_id, "pick/trial")]
    assert picks == [3, 4] and run.info.status == "FINISHED"


def test_mlflow_unreachable_server_stops_before_anything_is_written(tmp_path):
    need("mlflow")
    run_dir = tmp_path / "run"
    done = search(run_dir, "tracking=mlflow", f"tracking.uri=http://127.0.0.1:{free_port()}")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach the MLflow tracking server at http://127.0.0.1:"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run directory, no outputs, no mlruns


def test_a_missing_tracking_package_is_one_line_before_work(tmp_path, monkeypatch):
    from dots.errors import DotsError
    from dots.options.search import tracking_options
    from dots.search.study.tracking import open_tracking

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as if not installed
    options = tracking_options({"name": "wandb", "mode": "offline"})
    with pytest.raises(DotsError, match=r"tracking=wandb needs the wandb package.* 'dots-synth\[tracking\]'"):
        open_tracking(options)


# --- W&B, offline -------------------------------------------------------------------------


def wandb_run(run_dir: Path) -> dict:
    """What the offline W&B runs of `run_dir` hold, all their .wandb files together: the run ids,
    the config, the history rows and the summary."""
    out: dict = {"ids": set(), "config": {}, "history": [], "summary": {}, "artifacts": []}
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                out["ids"].add(record.run.run_id)
            elif kind == "config":
                out["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
            elif kind == "history":
                out["history"].append({"/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
            elif kind == "summary":
                for u in record.summary.update:
                    out["summary"].update(slashed("/".join(u.nested_key) or u.key, json.loads(u.value_json)))
            elif kind == "artifact":
                out["artifacts"].append({c.path for c in record.artifact.manifest.contents})
    return out


def slashed(key: str, value) -> dict:
    """A summary value as W&B shows it: a nested mapping as `key/sub` keys (W&B writes either form)."""
    if not isinstance(value, dict):
        return {key: value}
    return {k: v for sub, inner in value.items() for k, v in slashed(f"{key}/{sub}", inner).items()}


@pytest.fixture(scope="module")
def wandb_env(tmp_path_factory) -> dict[str, str]:
    """W&B offline, its data, cache and config directories under the test's directory."""
    need("wandb")
    tmp = tmp_path_factory.mktemp("wandb-home")
    dirs = {f"WANDB_{d}_DIR": str(tmp / d.lower()) for d in ("DATA", "CACHE", "CONFIG")}
    return cli_env(tmp / "outputs", WANDB_MODE="offline", WANDB_SILENT="true", **dirs)


def test_wandb_offline_run_holds_every_trial_the_pick_and_the_files_and_a_resume_adds_one(wandb_env, tmp_path):
    run_dir = tmp_path / "run"
    done = search(run_dir, "tracking=wandb", env=wandb_env)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "tracking" / "wandb-0.json").read_text())
    assert record["logged"] == [0, 1, 2]
    logged = wandb_run(run_dir)
    assert logged["ids"] == {record["run_id"]}
    assert logged["config"]["search"]["n_trials"] == 3 and logged["config"]["backbone"]["name"] == "lab"
    check_history(logged["history"], run_dir)
    result = yaml.safe_load((run_dir / "result.yaml").read_text())
    summary = logged["summary"]
    assert summary["pick/trial"] == result["trial"] and summary["scored_trials"] == 3
    assert summary["pick/consistency"] == result["objectives"]["consistency"]
    assert summary["pick/lambda_sft"] == result["coefficients"]["sft"]
    assert summary["pareto/_type"] == "image-file"
    (png,) = run_dir.glob("wandb/offline-run-*/files/" + summary["pareto/path"])
    assert png.read_bytes() == (run_dir / "pareto.png").read_bytes()
    assert summary["landscape/_type"] == "image-file"
    (png,) = run_dir.glob("wandb/offline-run-*/files/" + summary["landscape/path"])
    assert png.read_bytes() == (run_dir / "landscape.png").read_bytes()
    files = {"config.yaml", "result.yaml", "trials.csv", "pareto.png", "landscape.png", "confirm.json"}
    assert logged["artifacts"] == [files]  # confirm.json: the confirmation runs by default

    done = search(run_dir, "tracking=wandb", "search.n_trials=4", env=wandb_env)  # resumed: the same W&B run
    assert done.returncode == 0, done.stderr[-3000:]
    logged = wandb_run(run_dir)
    assert logged["ids"] == {record["run_id"]} and len(list(run_dir.glob("wandb/offline-run-*"))) == 2
    check_history(logged["history"], run_dir)  # trial 3 added, none twice
    assert logged["config"]["search"]["n_trials"] == 4


def check_history(history: list[dict], run_dir: Path) -> None:
    """One history row per scored trial of trials.csv (key `trial`), with its values."""
    rows = [h for h in history if "trial" in h and "pruned" in h]
    expected = scored_rows(run_dir)
    assert sorted(h["trial"] for h in rows) == [int(r["number"]) for r in expected]
    by_trial = {h["trial"]: h for h in rows}
    for r in expected:
        row = by_trial[int(r["number"])]
        assert {k: row[k] for k in r if k != "number"} == {k: v for k, v in r.items() if k != "number"}
