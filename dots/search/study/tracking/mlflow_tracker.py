"""tracking=mlflow: one MLflow run per search run directory, on any tracking server or store.

The run's id is kept in `<run_dir>/tracking/mlflow.json` (per tracking URI and experiment), so
a resumed or extended search, and every worker of a shared one, logs into the same MLflow run;
the trials it holds are the steps of its `pruned` metric, read from the server when it starts.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from dots.errors import DotsError, first_line
from dots.runtime.environ import environment
from dots.search.study.tracking.base import MARKER, RECORDS, flat, missing_package

CHECK_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}  # the check: fail fast
MAX_PARAM_LENGTH = 6000  # MLflow's limit on a param's value (the whole config is the config.yaml artifact)
BATCH = 100  # params per log_batch request (MLflow's limit)


def reason(exc: BaseException) -> str:
    """Why a request failed, short: the OS's reason ("Connection refused") when there is one."""
    text = first_line(exc)
    found = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
    return found.group(1) if found else text[:300]


class MlflowTracker:
    """The `Tracker` of tracking=mlflow (options: uri, experiment, run_name, tags)."""

    def __init__(self, options: dict):
        self.options = options
        self.client: Any = None
        self.run_id = ""
        self.uri = ""

    def check(self) -> None:
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise missing_package(exc, "mlflow", "mlflow-skinny") from None
        self.uri = str(self.options.get("uri") or mlflow.get_tracking_uri())  # null: $MLFLOW_TRACKING_URI, …
        mlflow.set_tracking_uri(self.uri)  # (MLflow < 3 resolves served artifacts by the global URI)
        self.client = MlflowClient(tracking_uri=self.uri)
        if not self.uri.startswith(("http://", "https://", "databricks")):
            return  # a local store: nothing to reach (and nothing written before the run starts)
        try:
            with environment(CHECK_ENV):
                self.client.search_experiments(max_results=1)
        except Exception as exc:
            raise DotsError(f"cannot reach the MLflow tracking server at {self.uri}: {reason(exc)}") from None

    def start(self, run_dir: Path, config: dict, worker: int, workers: int) -> set[int]:
        from dots.runtime.locks import run_once_lock

        record = run_dir / RECORDS / "mlflow.json"
        with run_once_lock(run_dir / RECORDS / ".mlflow.lock"):  # workers: one creates the run
            runs = json.loads(record.read_text()) if record.exists() else {}
            key = f"{self.uri} {self.options['experiment']}"
            self.run_id = runs.get(key) or ""
            if not self.run_id or not self._reopen():
                self.run_id = self._create(run_dir)
                runs[key] = self.run_id
                record.write_text(json.dumps(runs, indent=1) + "\n")
        self._log_params(config)
        self.client.log_artifact(self.run_id, str(run_dir / "config.yaml"))
        print(f"tracking: MLflow run {self.run_id} at {self.uri}")
        return {m.step for m in self.client.get_metric_history(self.run_id, MARKER)}

    def _reopen(self) -> bool:
        """The recorded run is still there (then marked RUNNING again); False when it was deleted."""
        try:
            run = self.client.get_run(self.run_id)
        except Exception:
            return False
        if run.info.lifecycle_stage == "deleted":
            return False
        if run.info.status != "RUNNING":
            self.client.update_run(self.run_id, status="RUNNING")
        return True

    def _create(self, run_dir: Path) -> str:
        name = str(self.options["experiment"])
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                experiment_id = self.client.create_experiment(name)
            except Exception:  # another worker made it first
                experiment_id = self.client.get_experiment_by_name(name).experiment_id
        else:
            experiment_id = experiment.experiment_id
        tags = {"dots.run_dir": str(run_dir.resolve()), **{str(k): str(v) for k, v in self.options["tags"].items()}}
        run = self.client.create_run(experiment_id, run_name=self.options.get("run_name") or run_dir.name, tags=tags)
        return str(run.info.run_id)

    def _log_params(self, config: dict) -> None:
        """The config as params; those the run holds already stay (MLflow params cannot change: a
        raised search.n_trials shows in the config.yaml artifact)."""
        from mlflow.entities import Param

        held = self.client.get_run(self.run_id).data.params
        params = [Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in flat(config).items() if k not in held]
        for i in range(0, len(params), BATCH):
            self.client.log_batch(self.run_id, params=params[i : i + BATCH])

    def log_trial(self, number: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, number) for k, v in metrics.items()])

    def log_pick(self, step: int, pick: dict[str, float], files: list[Path]) -> None:
        """The pick's values at step = scored trials (once per step: a rerun logs nothing new), and the
        files as artifacts (a rerun replaces them)."""
        from mlflow.entities import Metric

        if pick and step not in {m.step for m in self.client.get_metric_history(self.run_id, "pick/trial")}:
            now = int(time.time() * 1000)
            self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in pick.items()])
        for path in files:
            if path.exists():
                self.client.log_artifact(self.run_id, str(path))

    def close(self, status: str) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status)
