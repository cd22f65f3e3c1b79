"""The experiment trackers (tracking=mlflow, tracking=wandb) in this process, so that mutation testing
sees them (issue #49).

mutmut only counts tests that call a function inside the pytest process; tests/test_tracking.py runs
whole searches in subprocesses against a real MLflow server (20-46 s a test). Covered here, with the
real packages: `MlflowTracker` (reached through the `TRACKERS` registry and `open_tracking`) on a local
MLflow file store in tmp_path, read back with MLflow's own `MlflowClient` (params, metrics by step,
tags, artifacts, run status), its check's one-line errors against a local HTTP server that answers
badly or a port nothing listens on; and `WandbTracker` in W&B's offline mode (no network, no login),
read back from the `.wandb` file of each offline run (W&B's own protobuf records) and from the
tracker's record in `<run_dir>/tracking`.

Expected values are worked out by hand from the docstrings of dots/search/study/tracking/ (each test
says how), never copied from what the code printed.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import require_module, wandb_records

from dots.errors import DotsError
from dots.options.search import TrackingOptions
from dots.search.study.tracking import TRACKERS, open_tracking

# --- MLflow --------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A local MLflow store in tmp_path (its `file:` URI); MLflow's process-wide tracking URI, which
    `check` sets, put back after the test. $MLFLOW_TRACKING_URI points elsewhere, so a test sees
    which URI was used."""
    mlflow = require_module("mlflow")
    # MLflow 3 keeps its file store behind this switch (a SQLite store takes ~12 s to create its tables)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "env-store").as_uri())
    yield (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(None)  # (unset again; monkeypatch restores the variable)


def mlflow_tracker(uri: str | None, experiment: str = "exp", run_name: str | None = None, tags: dict | None = None):
    """tracking=mlflow with these options (as conf/tracking/mlflow.yaml spells them), checked."""
    settings = {"uri": uri, "experiment": experiment, "run_name": run_name, "tags": tags or {}}
    tracker = open_tracking(TrackingOptions("mlflow", settings)).tracker
    assert tracker is not None
    return tracker


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """A metric's (step, value) pairs, by step."""
    return sorted((m.step, m.value) for m in client(uri).get_metric_history(run_id, key))


def run_dir_with_config(tmp_path: Path, name: str = "run") -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("search:\n  n_trials: 3\n")
    return run_dir


def test_the_mlflow_tracker_logs_the_config_each_trial_the_pick_and_the_files(store, tmp_path, capsys):
    """One MLflow run per run directory: the config's leaves as params (long values cut to 6000
    characters), the config.yaml artifact, each trial's values at step = its number, the pick once
    per step, the files that exist as artifacts (a rerun replaces them), and FINISHED at the end."""
    run_dir = run_dir_with_config(tmp_path)
    tracker = mlflow_tracker(store, tags={"team": "math", 3: 4})
    config = {
        "search": {"n_trials": 3, "range": [0.0, 1.0]},
        "backbone": {"name": "lab"},
        "note": "x" * 7000,
        "many": {f"k{i:03d}": i for i in range(150)},  # 154 params: two batches of at most 100
    }
    assert tracker.start(run_dir, config, 0, 1) == set()  # a new run holds no trial
    run_id = tracker.run_id
    assert capsys.readouterr().out == f"tracking: MLflow run {run_id} at {store}\n"
    # the run's id, kept per "<uri> <experiment>" (json, indent 1, one line at the end)
    record = run_dir / "tracking" / "mlflow.json"
    assert record.read_text() == json.dumps({f"{store} exp": run_id}, indent=1) + "\n"
    assert sorted(p.name for p in record.parent.iterdir()) == [".mlflow.lock", "mlflow.json"]  # (workers' lock)

    mlflow = client(store)
    run = mlflow.get_run(run_id)
    assert run.info.status == "RUNNING" and run.info.run_name == "run"  # run_name null: the directory's name
    assert mlflow.get_experiment(run.info.experiment_id).name == "exp"  # created when missing
    assert run.data.tags["dots.run_dir"] == str(run_dir.resolve())
    assert run.data.tags["team"] == "math" and run.data.tags["3"] == "4"  # tags as strings
    expected = {
        "search.n_trials": "3",
        "search.range": "[0.0, 1.0]",
        "backbone.name": "lab",
        "note": "x" * 6000,
        **{f"many.k{i:03d}": str(i) for i in range(150)},
    }
    assert run.data.params == expected
    assert [a.path for a in mlflow.list_artifacts(run_id)] == ["config.yaml"]

    before = int(time.time() * 1000)
    tracker.log_trial(2, {"consistency": 0.75, "perplexity": 1.5, "pruned": 1.0})
    tracker.log_trial(0, {"consistency": 0.5, "pruned": 0.0})
    after = int(time.time() * 1000)
    assert history(store, run_id, "consistency") == [(0, 0.5), (2, 0.75)]
    assert history(store, run_id, "perplexity") == [(2, 1.5)]
    assert history(store, run_id, "pruned") == [(0, 0.0), (2, 1.0)]
    stamps = [m.timestamp for m in mlflow.get_metric_history(run_id, "consistency")]
    assert all(before <= t <= after for t in stamps), (before, stamps, after)  # now, in milliseconds

    (run_dir / "result.yaml").write_text("trial: 2\n")
    (run_dir / "trials.csv").write_text("number\n0\n2\n")
    files = [run_dir / "result.yaml", run_dir / "trials.csv", run_dir / "pareto.png"]  # no pareto.png: skipped
    tracker.log_pick(2, {"pick/trial": 2.0, "pick/lambda_sft": 0.25}, files)
    assert history(store, run_id, "pick/trial") == [(2, 2.0)]
    assert history(store, run_id, "pick/lambda_sft") == [(2, 0.25)]
    assert sorted(a.path for a in mlflow.list_artifacts(run_id)) == ["config.yaml", "result.yaml", "trials.csv"]
    pick_stamp = mlflow.get_metric_history(run_id, "pick/trial")[0].timestamp
    assert after <= pick_stamp <= int(time.time() * 1000)

    (run_dir / "result.yaml").write_text("trial: 2\nrerun: true\n")
    tracker.log_pick(2, {"pick/trial": 2.0, "pick/lambda_sft": 0.25}, files)  # the same step: no new value
    assert history(store, run_id, "pick/trial") == [(2, 2.0)]
    got = mlflow.download_artifacts(run_id, "result.yaml", str(tmp_path))
    assert Path(got).read_text() == "trial: 2\nrerun: true\n"  # the file replaced
    tracker.log_pick(3, {"pick/trial": 3.0}, [])
    assert history(store, run_id, "pick/trial") == [(2, 2.0), (3, 3.0)]

    tracker.close("FINISHED")
    run = mlflow.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.end_time is not None


def test_a_restarted_mlflow_tracker_reopens_the_recorded_run_and_returns_its_trials(store, tmp_path, capsys):
    """A second start on the same run directory, URI and experiment reopens the recorded run
    (RUNNING again after KILLED or FAILED), keeps the params it holds, adds the new ones and returns
    the trials it holds (the steps of `pruned`); another experiment gets a run of its own."""
    run_dir = run_dir_with_config(tmp_path)
    first = mlflow_tracker(store)
    first.start(run_dir, {"search": {"n_trials": 3}}, 0, 1)
    run_id = first.run_id
    first.log_trial(0, {"consistency": 0.5, "pruned": 0.0})
    first.log_trial(1, {"consistency": 0.25, "pruned": 1.0})
    first.close("KILLED")
    mlflow = client(store)
    assert mlflow.get_run(run_id).info.status == "KILLED"

    second = mlflow_tracker(store)
    assert second.start(run_dir, {"search": {"n_trials": 4}, "extra": 1}, 0, 1) == {0, 1}
    assert second.run_id == run_id
    run = mlflow.get_run(run_id)
    assert run.info.status == "RUNNING"
    assert run.data.params == {"search.n_trials": "3", "extra": "1"}  # a param never changes; new ones added
    record = run_dir / "tracking" / "mlflow.json"
    assert json.loads(record.read_text()) == {f"{store} exp": run_id}
    second.log_trial(2, {"consistency": 0.125, "pruned": 1.0})
    second.close("FAILED")
    assert mlflow.get_run(run_id).info.status == "FAILED"

    third = mlflow_tracker(store)
    assert third.start(run_dir, {}, 0, 1) == {0, 1, 2}
    assert third.run_id == run_id and mlflow.get_run(run_id).info.status == "RUNNING"
    assert history(store, run_id, "consistency") == [(0, 0.5), (1, 0.25), (2, 0.125)]

    other = mlflow_tracker(store, experiment="other")
    assert other.start(run_dir, {}, 0, 1) == set()
    assert other.run_id != run_id
    assert mlflow.get_experiment(mlflow.get_run(other.run_id).info.experiment_id).name == "other"
    assert json.loads(record.read_text()) == {f"{store} exp": run_id, f"{store} other": other.run_id}
    capsys.readouterr()


def test_a_deleted_or_unknown_recorded_run_is_replaced_by_a_new_one(store, tmp_path, capsys):
    """The recorded run is reopened only while it is there: a run id the store does not know, or a
    run deleted since, gets a new run, recorded in its place."""
    run_dir = run_dir_with_config(tmp_path)
    record = run_dir / "tracking" / "mlflow.json"
    record.parent.mkdir()
    record.write_text(json.dumps({f"{store} exp": "0" * 32, "elsewhere exp": "kept"}))
    tracker = mlflow_tracker(store)
    assert tracker.start(run_dir, {}, 0, 1) == set()
    first = tracker.run_id
    assert first != "0" * 32
    assert json.loads(record.read_text()) == {f"{store} exp": first, "elsewhere exp": "kept"}

    client(store).delete_run(first)
    again = mlflow_tracker(store)
    assert again.start(run_dir, {}, 0, 1) == set()
    assert again.run_id not in ("", first)
    assert client(store).get_run(again.run_id).info.lifecycle_stage == "active"
    assert json.loads(record.read_text()) == {f"{store} exp": again.run_id, "elsewhere exp": "kept"}
    capsys.readouterr()


def test_an_existing_experiment_is_used_and_so_is_one_another_worker_made_meanwhile(
    store, tmp_path, monkeypatch, capsys
):
    """The run goes into the experiment of that name when it exists; when another worker creates it
    between the lookup and the creation, into that one. run_name names the run; the run directory
    is tagged as an absolute path."""
    mlflow = client(store)
    made = mlflow.create_experiment("exp")
    tracker = mlflow_tracker(store, run_name="named")
    tracker.start(run_dir_with_config(tmp_path, "a"), {}, 0, 1)
    run = mlflow.get_run(tracker.run_id)
    assert run.info.experiment_id == made and run.info.run_name == "named"

    racer = mlflow_tracker(store, experiment="raced")
    lookup = racer.client.get_experiment_by_name
    seen: list[str] = []

    def another_worker_first(name):  # the first lookup misses: another worker creates it right then
        if not seen:
            seen.append(mlflow.create_experiment(name))
            return None
        return lookup(name)

    monkeypatch.setattr(racer.client, "get_experiment_by_name", another_worker_first)
    monkeypatch.chdir(tmp_path)
    racer.start(run_dir_with_config(Path("."), "b"), {}, 0, 1)  # a relative run directory
    run = mlflow.get_run(racer.run_id)
    assert run.info.experiment_id == seen[0] and run.info.run_name == "b"
    assert run.data.tags["dots.run_dir"] == str((tmp_path / "b").resolve())  # tagged with its absolute path
    capsys.readouterr()


def test_a_null_uri_is_mlflows_own_and_the_check_makes_it_the_process_uri(store, monkeypatch):
    """tracking.uri null: MLflow's own URI ($MLFLOW_TRACKING_URI here); the check sets MLflow's
    tracking URI to the one it uses (MLflow < 3 resolves served artifacts by it)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    assert mlflow_tracker(None).uri == store
    other = store.replace("mlruns", "other")
    assert mlflow_tracker(other).uri == other  # an option wins over the variable
    assert mlflow.get_tracking_uri() == other


def serve(status: int, body: bytes):
    """A local HTTP server answering every request with `status` and `body`; (its URI, the paths it
    was asked for, the server)."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", asked, server


def test_an_unreachable_mlflow_server_is_one_line_with_the_os_reason(store):
    """Nothing listening (http or https): the check fails at once with the OS's reason, cut out of
    requests' long message ("... [Errno 111] Connection refused'))")."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    for uri in (f"http://127.0.0.1:{port}", f"https://127.0.0.1:{port}"):
        with pytest.raises(DotsError) as caught:
            mlflow_tracker(uri)
        assert str(caught.value) == f"cannot reach the MLflow tracking server at {uri}: Connection refused"


def test_an_mlflow_server_that_answers_badly_is_asked_once_and_its_first_line_is_cut(store, monkeypatch):
    """A server's error: its message's first line, at most 300 characters (MLflow writes a 400's
    JSON error as "BAD_REQUEST: <message>"); a 500 is not retried by the check (no retries, so a
    dead server fails fast), where MLflow retries it by default."""
    message = "no " * 150 + "\nsecond line"
    body = json.dumps({"error_code": "BAD_REQUEST", "message": message}).encode()
    uri, asked, server = serve(400, body)
    try:
        with pytest.raises(DotsError) as caught:
            mlflow_tracker(uri)
    finally:
        server.shutdown()
    expected = ("BAD_REQUEST: " + "no " * 150)[:300]  # 13 + 287 characters, the second line dropped
    assert str(caught.value) == f"cannot reach the MLflow tracking server at {uri}: {expected}"
    assert asked == ["/api/2.0/mlflow/experiments/search"]  # asked once

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")  # (retries, were there any, at once)
    uri, asked, server = serve(500, b"{}")
    try:
        with pytest.raises(DotsError, match=f"^cannot reach the MLflow tracking server at {uri}: API request to "):
            mlflow_tracker(uri)
    finally:
        server.shutdown()
    assert len(asked) == 1


@pytest.mark.parametrize("missing", ["mlflow", "mlflow.tracking"])
def test_a_missing_mlflow_package_is_one_line(store, monkeypatch, missing):
    """mlflow (or its client) not importable: one line naming the package to install."""
    monkeypatch.setitem(sys.modules, missing, None)  # `import` fails as if it were not installed
    with pytest.raises(DotsError) as caught:
        mlflow_tracker(store)
    text = str(caught.value)
    assert re.fullmatch(
        r"tracking=mlflow needs the mlflow-skinny package, which cannot be imported \(.+\): "
        r"pip install 'dots-synth\[tracking\]' \(or pip install mlflow-skinny\), or run with tracking=none",
        text,
    ), text
    assert f"import of {missing} halted" in text  # the ImportError's own words


def test_an_mlflow_tracker_never_started_closes_without_a_request():
    """close before start (the search stopped before the run was opened): nothing to end."""
    tracker = TRACKERS.lookup("mlflow")({"uri": None, "experiment": "exp", "run_name": None, "tags": {}})
    tracker.close("FAILED")  # no client yet: a request would fail
    assert tracker.run_id == ""


# --- W&B, offline --------------------------------------------------------------------------------


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """W&B with no key, no mode and no dir from the environment, its own files under tmp_path (the
    working directory too), nothing printed and no console capture (offline runs: no network). W&B
    reads the environment once per process setup, so its setup (and service) is ended after the test."""
    wandb = require_module("wandb")
    monkeypatch.chdir(tmp_path)
    for name in (
        "WANDB_MODE",
        "WANDB_DIR",
        "WANDB_API_KEY",
        "WANDB_BASE_URL",
        "WANDB_PROJECT",
        "WANDB_ENTITY",
        "WANDB_RUN_ID",
        "WANDB_RESUME",
        "WANDB_RUN_GROUP",
        "WANDB_TAGS",
        "WANDB_NAME",
        "WANDB_JOB_TYPE",
    ):
        monkeypatch.delenv(name, raising=False)  # fmt: skip
    home = tmp_path / "wandb-home"
    for kind in ("DATA", "CACHE", "CONFIG"):
        monkeypatch.setenv(f"WANDB_{kind}_DIR", str(home / kind.lower()))
    monkeypatch.setenv("NETRC", str(home / "netrc"))  # (no such file: no key there)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    yield wandb
    wandb.teardown()


def wandb_tracker(**options: Any):
    """tracking=wandb with these options over conf/tracking/wandb.yaml's defaults (offline), checked."""
    settings = {"project": "proj", "entity": None, "mode": "offline", "dir": None, "run_name": None,
                "group": None, "tags": [], **options}  # fmt: skip
    tracker = open_tracking(TrackingOptions("wandb", settings)).tracker
    assert tracker is not None
    return tracker


def offline_run(run_path: Path) -> dict:
    """What one offline run directory's `.wandb` file holds: the run record, the config, the metric
    definitions, the history rows (without W&B's own `_` keys), the summary, the artifacts and the
    exit code."""
    out: dict = {"config": {}, "metrics": [], "history": [], "summary": {}, "artifacts": [], "exit": None}
    (path,) = run_path.glob("run-*.wandb")
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in record.config.update if u.key != "_wandb"})
        elif kind == "metric":
            out["metrics"].append((record.metric.name, record.metric.glob_name, record.metric.step_metric))
        elif kind == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            out["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "summary":
            out["summary"].update(
                {"/".join(u.nested_key) or u.key: json.loads(u.value_json) for u in record.summary.update}
            )
        elif kind == "artifact":
            art = record.artifact
            out["artifacts"].append((art.name, art.type, sorted(c.path for c in art.manifest.contents)))
        elif kind == "exit":
            out["exit"] = record.exit.exit_code
    return out


def offline_runs(directory: Path) -> list[Path]:
    """The offline run directories W&B wrote under `directory/wandb`, oldest first."""
    return sorted(directory.glob("wandb/offline-run-*"))


def png(path: Path, colour: tuple[int, int, int]) -> Path:
    from PIL import Image

    Image.new("RGB", (2, 3), colour).save(path)
    return path


def test_the_wandb_mode_is_the_option_else_the_environment_else_online(monkeypatch):
    """tracking.mode, else $WANDB_MODE, else online."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert TRACKERS.lookup("wandb")({"mode": "disabled"}).mode() == "disabled"
    assert TRACKERS.lookup("wandb")({"mode": None}).mode() == "offline"
    monkeypatch.delenv("WANDB_MODE")
    assert TRACKERS.lookup("wandb")({}).mode() == "online"


def test_an_offline_or_disabled_wandb_check_asks_nothing_of_wandb(wandb_env, monkeypatch):
    """Offline (or disabled), the check only imports wandb: no login, so even a malformed key, which
    W&B's login refuses, passes."""
    monkeypatch.setenv("WANDB_API_KEY", "short")
    wandb_tracker(mode="offline")
    wandb_tracker(mode="disabled")
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_tracker(mode=None)


def test_an_online_wandb_check_without_a_key_or_with_a_bad_one_is_one_line(wandb_env, monkeypatch):
    """Online: no API key anywhere is one line saying how to log in or go offline; a login that
    fails (W&B refuses a key shorter than 40 characters before asking anything) is one line too."""
    with pytest.raises(DotsError) as caught:
        wandb_tracker(mode="online")
    assert str(caught.value) == (
        "tracking=wandb is online but W&B has no API key: run `wandb login` or set WANDB_API_KEY, "
        "or log offline with tracking.mode=offline (then `wandb sync`)"
    )
    monkeypatch.setenv("WANDB_API_KEY", "short")
    with pytest.raises(DotsError) as caught:
        wandb_tracker(mode=None)  # (mode null, no $WANDB_MODE: online)
    text = str(caught.value)
    assert re.fullmatch(
        r"tracking=wandb cannot log in to W&B: .*API key.* \(or log offline: tracking\.mode=offline\)", text
    ), text


def test_a_missing_wandb_package_is_one_line(monkeypatch):
    """wandb not importable: one line naming the package to install."""
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(DotsError) as caught:
        wandb_tracker()
    text = str(caught.value)
    assert re.fullmatch(
        r"tracking=wandb needs the wandb package, which cannot be imported \(import of wandb halted.*\): "
        r"pip install 'dots-synth\[tracking\]' \(or pip install wandb\), or run with tracking=none",
        text,
    ), text


def test_the_wandb_tracker_logs_the_config_each_trial_and_the_pick_into_one_offline_run(wandb_env, tmp_path):
    """One worker, no dir: W&B's files in the run directory; a run named after it (no group), its
    id and the trials logged kept in tracking/wandb-0.json; the config; a history row per trial with
    `trial` as every chart's x axis; the pick and the Pareto plot in the summary; the files that
    exist as one `dots-search` artifact named after the run; exit code 0 when FINISHED."""
    run_dir = tmp_path / "lab.v2 run+1"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("search:\n  n_trials: 3\n")
    (run_dir / "result.yaml").write_text("trial: 2\n")
    pareto = png(run_dir / "pareto.png", (255, 0, 0))
    tracker = wandb_tracker(tags=("math", "small"))
    config = {"search": {"n_trials": 3}, "backbone": {"name": "lab"}}
    assert tracker.start(run_dir, config, 0, 1) == set()
    record = run_dir / "tracking" / "wandb-0.json"
    held = json.loads(record.read_text())
    run_id = held["run_id"]
    assert re.fullmatch(r"[0-9a-f]{8}", run_id) and held == {"run_id": run_id, "logged": []}  # token_hex(4)
    assert record.read_text() == json.dumps(held) + "\n"

    tracker.log_trial(2, {"consistency": 0.75, "pruned": 1.0})
    assert json.loads(record.read_text()) == {"run_id": run_id, "logged": [2]}
    tracker.log_trial(0, {"consistency": 0.5, "pruned": 0.0})
    assert json.loads(record.read_text()) == {"run_id": run_id, "logged": [2, 0]}  # in the order logged
    assert sorted(p.name for p in record.parent.iterdir()) == ["wandb-0.json"]  # the .tmp replaced it
    files = [run_dir / n for n in ("config.yaml", "result.yaml", "pareto.png", "landscape.png", "trials.csv")]
    tracker.log_pick(2, {"pick/trial": 2.0, "pick/consistency": 0.75}, files)  # no landscape.png, no trials.csv
    tracker.close("FINISHED")
    assert tracker.run is None
    tracker.close("FAILED")  # closed already: nothing
    wandb_env.teardown()  # W&B's service ended: the .wandb file is complete (finish may leave it buffered)

    (run_path,) = offline_runs(run_dir)
    assert run_path.name.endswith(f"-{run_id}")
    logged = offline_run(run_path)
    run = logged["run"]
    assert (run.run_id, run.project, run.display_name, run.run_group) == (run_id, "proj", "lab.v2 run+1", "")
    assert list(run.tags) == ["math", "small"] and run.job_type == "search"
    assert logged["config"] == config
    assert logged["metrics"] == [("trial", "", ""), ("", "*", "trial")]
    assert logged["history"] == [
        {"trial": 2, "consistency": 0.75, "pruned": 1.0},
        {"trial": 0, "consistency": 0.5, "pruned": 0.0},
    ]
    summary = logged["summary"]
    assert summary["pick/trial"] == 2.0 and summary["pick/consistency"] == 0.75 and summary["scored_trials"] == 2
    assert summary["pareto"]["_type"] == "image-file" and "landscape" not in summary
    assert (run_path / "files" / summary["pareto"]["path"]).read_bytes() == pareto.read_bytes()
    # the artifact's name: "dots-" + the run's name, each character but letters, digits, _ . - as _
    assert logged["artifacts"] == [("dots-lab.v2_run_1", "dots-search", ["config.yaml", "pareto.png", "result.yaml"])]
    assert logged["exit"] == 0


def test_a_restarted_wandb_worker_resumes_its_run_and_returns_the_trials_it_logged(wandb_env, tmp_path):
    """Worker 1 of 2, tracking.dir set: W&B's files there; the run named `<run_name>-worker1`,
    grouped by the run directory's name, its record tracking/wandb-1.json; a second start resumes
    the same W&B run, returns the trials logged and logs the config it runs now; exit code 1 when
    FAILED or KILLED; the landscape plot in the summary when there is one."""
    run_dir = tmp_path / "run"
    (run_dir / "tracking").mkdir(parents=True)
    record = run_dir / "tracking" / "wandb-1.json"
    record.write_text(json.dumps({"run_id": "feedc0de", "logged": [3, 1, 3]}))
    where = tmp_path / "w"
    first = wandb_tracker(dir=str(where), run_name="lab")
    assert first.start(run_dir, {"search": {"n_trials": 3}}, 1, 2) == {1, 3}
    assert first.run.settings.resume == "allow"  # (offline, W&B checks nothing: its settings say it)
    assert json.loads(record.read_text()) == {"run_id": "feedc0de", "logged": [1, 3]}  # each once, in order
    first.log_trial(5, {"consistency": 0.25, "pruned": 0.0})
    first.close("FAILED")

    second = wandb_tracker(dir=str(where), run_name="lab")
    assert second.start(run_dir, {"search": {"n_trials": 4}}, 1, 2) == {1, 3, 5}
    landscape = png(run_dir / "landscape.png", (0, 0, 255))
    second.log_pick(4, {}, [run_dir / "pareto.png", landscape])  # no pareto.png
    second.close("KILLED")
    wandb_env.teardown()

    assert not (run_dir / "wandb").exists()  # tracking.dir: W&B's files there, not in the run directory
    runs = [offline_run(p) for p in offline_runs(where)]
    assert [(r["run"].run_id, r["run"].display_name, r["run"].run_group) for r in runs] == [
        ("feedc0de", "lab-worker1", "run"),
        ("feedc0de", "lab-worker1", "run"),
    ]
    assert [r["config"] for r in runs] == [{"search": {"n_trials": 3}}, {"search": {"n_trials": 4}}]
    assert [r["exit"] for r in runs] == [1, 1]
    assert runs[0]["history"] == [{"trial": 5, "consistency": 0.25, "pruned": 0.0}] and runs[1]["history"] == []
    summary = runs[1]["summary"]
    assert summary["scored_trials"] == 4 and summary["landscape"]["_type"] == "image-file" and "pareto" not in summary
    assert runs[1]["artifacts"] == [("dots-lab-worker1", "dots-search", ["landscape.png"])]


def test_wandb_files_go_to_wandb_dir_and_a_group_option_names_the_group(wandb_env, tmp_path, monkeypatch):
    """$WANDB_DIR set and no tracking.dir: W&B's files there; tracking.group names the group; a
    record without trials (an id only) is resumed with none."""
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "env-dir"))
    run_dir = tmp_path / "run"
    (run_dir / "tracking").mkdir(parents=True)
    (run_dir / "tracking" / "wandb-2.json").write_text(json.dumps({"run_id": "cafe0001"}))
    monkeypatch.setenv("WANDB_MODE", "offline")
    tracker = wandb_tracker(group="grp", mode=None, project="other", entity="team")
    assert tracker.start(run_dir, {}, 2, 3) == set()
    tracker.close("FINISHED")
    wandb_env.teardown()
    assert not (run_dir / "wandb").exists()
    (run_path,) = offline_runs(tmp_path / "env-dir")
    logged = offline_run(run_path)
    run = logged["run"]
    assert (run.run_id, run.project, run.display_name, run.run_group) == ("cafe0001", "other", "run-worker2", "grp")
    assert run.entity == "team"
    assert json.loads((run_dir / "tracking" / "wandb-2.json").read_text()) == {"run_id": "cafe0001", "logged": []}
    assert logged["exit"] == 0
