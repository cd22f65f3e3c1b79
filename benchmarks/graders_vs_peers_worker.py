"""The peer graders of benchmarks/graders_vs_peers.py: their venvs, and the worker that grades
every pair with them — run as `graders_vs_peers.py --worker` inside a peer's venv (or with an
archived dots on PYTHONPATH for `--baseline-ref`), so this module imports nothing but the
standard library at its top."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.results import REPO

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


PEER_TIMEOUT_S = 30


class _PeerTimeout(BaseException):
    pass


def _peer(name: str):
    """The verdict function (completion, gold) -> bool of one peer grader."""
    if name == "math_verify":
        from math_verify import parse, verify

        return lambda c, g: verify(parse(g), parse(c))
    if name == "lm_eval_minerva":
        from lm_eval.tasks.minerva_math import utils as u

        def minerva(c, g):
            ans = u.get_unnormalized_answer(c)
            if ans == "[invalidanswer]":
                box = u.last_boxed_only_string(c)
                if box is None:
                    return False
                ans = u.remove_boxed(box)
            gbox = u.last_boxed_only_string(g)
            gold = u.remove_boxed(gbox) if gbox else g
            return u.is_equiv(u.normalize_final_answer(ans), u.normalize_final_answer(gold))

        return minerva
    if name.startswith("verl_"):
        import importlib

        mod = importlib.import_module("verl.utils.reward_score." + name[len("verl_") :])
        if name == "verl_math_dapo":
            return lambda c, g: mod.compute_score(c, g)["acc"]
        if name == "verl_prime_math":
            return lambda c, g: mod.compute_score(c, g)[0]
        return lambda c, g: mod.compute_score(c, g) == 1.0
    if name == "dots":  # whichever dots is first on PYTHONPATH (--baseline-ref)
        from dots.scoring import is_correct

        return is_correct
    raise ValueError(name)


def worker(names: list[str], pairs_path: str, out_path: str) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    pairs = [json.loads(line) for line in open(pairs_path)]

    def on_alarm(signum, frame):
        raise _PeerTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "w") as out:
        for name in names:
            fn = _peer(name)
            start = time.monotonic()
            verdicts = []
            for p in pairs:
                signal.alarm(PEER_TIMEOUT_S)
                try:
                    verdicts.append(bool(fn(p["completion"], p["gold"])))
                except (Exception, _PeerTimeout):
                    verdicts.append(None)
                finally:
                    signal.alarm(0)
            seconds = time.monotonic() - start
            out.write(json.dumps({"grader": name, "verdicts": verdicts, "seconds": seconds}) + "\n")
            out.flush()


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
        str(Path(__file__).resolve().with_name("graders_vs_peers.py")),
        "--worker",
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
