"""The peer graders of `python -m benchmarks.grading peers`: their venvs (each installed once, its
versions read back), the run of benchmarks/grading/worker.py in one of them, and the scoring code of
an older dots commit (`--baseline-ref`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.results import REPO

VENVS = {
    "mv-lmeval": {"packages": ["math-verify", "lm-eval[math]"], "system_site": False},
    "verl": {"packages": ["verl"], "system_site": True},
}


PEERS = {
    "math_verify": "mv-lmeval",
    "lm_eval_minerva": "mv-lmeval",
    "verl_math_reward": "verl",
    "verl_math_dapo": "verl",
    "verl_prime_math": "verl",
    "verl_math_verify": "verl",
}


VERSIONS_OF = ["math-verify", "latex2sympy2_extended", "lm_eval", "verl", "sympy", "antlr4-python3-runtime"]


def setup_venv(root: Path, name: str, reinstall: bool) -> dict:
    spec = VENVS[name]
    path = root / name
    py = path / "bin" / "python"
    log = root / f"{name}.pip.log"
    info: dict = {"venv": str(path), "packages": spec["packages"], "log": str(log)}
    marker = path / ".dots-installed"
    if reinstall or not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        cmd = [sys.executable, "-m", "venv", str(path)] + (["--system-site-packages"] if spec["system_site"] else [])
        subprocess.run(cmd, check=True)
        with open(log, "w") as fh:
            rc = subprocess.run(
                [str(py), "-m", "pip", "install", *spec["packages"]], stdout=fh, stderr=subprocess.STDOUT
            ).returncode
        info["install_seconds"] = round(time.monotonic() - start, 1)
        info["pip_rc"] = rc
        if rc == 0:
            marker.write_text("ok\n")
    else:
        info["pip_rc"] = 0
    if info["pip_rc"] != 0:
        info["error"] = "pip install failed: " + " | ".join(log.read_text().strip().splitlines()[-5:])
        return info
    freeze = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True).stdout
    wanted = {v.lower().replace("_", "-") for v in VERSIONS_OF}
    info["versions"] = {
        p["name"]: p["version"] for p in json.loads(freeze or "[]") if p["name"].lower().replace("_", "-") in wanted
    }
    return info


def run_worker(python: str, names: list[str], pairs_path: Path, env: dict | None = None) -> dict:
    out = pairs_path.with_name(f"verdicts-{'-'.join(names)}.jsonl")
    cmd = [
        python,
        str(Path(__file__).resolve().with_name("worker.py")),
        ",".join(names),
        str(pairs_path),
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    got = {}
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            got[row["grader"]] = row
    for name in names:
        if name not in got:
            got[name] = {"grader": name, "error": f"worker rc {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return got


def baseline_tree(ref: str, root: Path) -> Path:
    """dots/__init__.py, dots/errors.py and dots/scoring of commit `ref`, for `dots@ref`."""
    dest = root / f"dots-{ref}"
    if not (dest / "dots" / "scoring").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", ref, "dots/__init__.py", "dots/errors.py", "dots/scoring"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
