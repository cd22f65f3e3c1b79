"""A finished lab search opened in a real optuna-dashboard server on localhost: its trials
(λ, phase times, objective names), the pick, and the Pareto plot read back over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import SMALL_LAB, free_port, get, require_module, wait_until_serving

require_module("optuna_dashboard", module=True)


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory) -> tuple[Path, str]:
    """A finished search on the lab backbone; its run directory and the dashboard command it printed."""
    tmp = tmp_path_factory.mktemp("dash")
    env = dict(os.environ, DOTS_OUTPUTS=str(tmp / "outputs"))
    done = subprocess.run(
        [sys.executable, "-m", "dots.search", "backbone=lab", *SMALL_LAB, f"run_dir={tmp / 'run'}"],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (command,) = [
        line.split("dashboard: ", 1)[1] for line in done.stdout.splitlines() if line.startswith("dashboard: ")
    ]
    return tmp / "run", command


def test_dashboard_serves_the_trials_the_pick_and_the_pareto_plot(lab_run):
    run_dir, command = lab_run
    exe = shutil.which("optuna-dashboard") or str(Path(sys.executable).with_name("optuna-dashboard"))
    port = free_port()
    args = [exe, *command.split()[1:], "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base + "/api/meta", server, "optuna-dashboard", timeout=60)
        (study,) = json.loads(get(base + "/api/studies"))["study_summaries"]
        detail = json.loads(get(f"{base}/api/studies/{study['study_id']}"))
        assert detail["objective_names"] == ["consistency", "perplexity"]
        assert detail["directions"] == ["maximize", "minimize"]
        trials = [t for t in detail["trials"] if t["state"] == "Complete"]
        assert len(trials) == 3
        for trial in trials:
            assert {p["name"] for p in trial["params"]} == {"lambda_sft", "lambda_rlvr"}
            times = next(json.loads(a["value"]) for a in trial["user_attrs"] if a["key"] == "time")
            assert {"swap", "generate"} <= set(times)
        result = yaml.safe_load((run_dir / "result.yaml").read_text())
        pick = next(json.loads(a["value"]) for a in detail["user_attrs"] if a["key"] == "pick")
        assert pick["trial"] == result["trial"] and pick["coefficients"] == result["coefficients"]
        artifacts = {a["filename"]: a["artifact_id"] for a in detail["artifacts"]}
        assert {"pareto.png", "landscape.png", "result.yaml", "trials.csv"} <= set(artifacts)
        for name in ("pareto.png", "landscape.png"):
            png = get(f"{base}/artifacts/{study['study_id']}/{artifacts[name]}")
            assert png == (run_dir / name).read_bytes() and png.startswith(b"\x89PNG")
    finally:
        server.terminate()
        server.wait(timeout=30)
