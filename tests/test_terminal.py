"""What a newcomer's terminal shows: the memory plan in two lines (the rest in plan.txt), the pick
as the README states it, the progress bar's standing pick, other libraries' lines in the log file,
one-line refusals that come at once (no engine import, no Hub retries), the lab's one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAB_RUN = REPO / "docs" / "figures" / "lab" / "landscape-run"


def python(code_or_args: list[str], env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0", **(env or {})},
    )  # fmt: skip


def test_the_memory_plan_is_two_lines_unless_asked_and_names_its_file(tmp_path):
    """The search prints `brief`: the model and what the engine takes, then where τ̃ lives and why,
    naming the file of every figure; `show_plan=full` is `dots plan`'s whole table; anything else is
    one line."""
    from dots.errors import DotsError
    from dots.io.shapes import ModelShapes
    from dots.plan.decide import EngineSetting, plan_memory
    from dots.plan.render import announce, describe
    from dots.runtime.devices import DeviceMemory

    shapes = ModelShapes.from_config_file(REPO / "benchmarks" / "shapes" / "qwen2.5-7b.json")
    setting = EngineSetting("hf", "cpu", sequences=16, max_tokens=64)
    plan = plan_memory(shapes, setting, DeviceMemory(10**11, 10**11, "t"), 2, 0.3)
    brief = announce(plan, "brief", tmp_path / "plan.txt")
    assert len(brief) == 2 and brief[0].startswith("memory plan: 7.62 B parameters, 2 sources; engine hf on cpu")
    assert brief[1].startswith("  → synth_cache=") and brief[1].endswith(
        f"{tmp_path / 'plan.txt'} (show_plan=full prints them)"
    )
    assert "CUDA" not in "\n".join(describe(plan))  # (a CPU's reserve is not a CUDA context)
    assert announce(plan, "full") == describe(plan) and len(describe(plan)) > 5
    with pytest.raises(DotsError, match="show_plan must be one of brief, full"):
        announce(plan, "all")


def test_the_pick_line_is_the_readmes_rounding():
    """The search's last line on the README's run: λ at 2 decimals as the README writes it, the
    confirmed C and its interval in the README's words."""
    import yaml

    from dots.search.pick.report import pick_line

    line = pick_line(yaml.safe_load((LAB_RUN / "result.yaml").read_text()), "smoothed")
    assert line.startswith("pick (smoothed, confirmed): trial 7, λ sft=0.61, rlvr=0.63; C 0.942, PPL 7.09")
    readme = " ".join((REPO / "README.md").read_text().split())
    said = line.split("; confirmed ")[1]  # C 0.949, 95% interval 0.921–0.977 over 64 queries
    assert f"(confirmed {said}):" in readme


def test_the_progress_text_names_the_pick_as_it_stands(tmp_path):
    """After each trial the bar shows the trial the pick rule would take now (here the smoothed C's
    favourite), not the trial of the highest C."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from dots.search.pick.report import standing_pick
    from dots.search.pick.rules import PickContext

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    dist = {"lambda_sft": FloatDistribution(0.5, 2.0), "lambda_rlvr": FloatDistribution(0.5, 2.0)}
    # a lone lucky C at (2, 2) among poor neighbours, and a steady region near (0.6, 0.6)
    points = [
        ((2.0, 2.0), 0.97, 9.0),
        ((1.9, 1.9), 0.6, 9.0),
        ((2.0, 1.8), 0.6, 9.0),
        ((1.8, 2.0), 0.62, 9.0),
        ((0.6, 0.6), 0.95, 7.0),
        ((0.65, 0.6), 0.95, 7.1),
        ((0.6, 0.65), 0.94, 7.2),
        ((0.55, 0.6), 0.95, 7.0),
    ]
    for (a, b), c, ppl in points:  # fmt: skip
        study.add_trial(create_trial(params={"lambda_sft": a, "lambda_rlvr": b}, distributions=dist, values=[c, ppl]))
    text = standing_pick(["sft", "rlvr"], "smoothed", PickContext(bounds=(0.5, 2.0)))(study)
    highest = standing_pick(["sft", "rlvr"], "max_consistency", PickContext(bounds=(0.5, 2.0)))(study)
    assert highest.startswith("pick now #0 (C 0.970")
    assert text.startswith("pick now #") and not text.startswith("pick now #0 ") and "front of" in text


def test_other_libraries_lines_go_to_the_log_file_not_the_terminal(tmp_path):
    """transformers' deprecations, the Hub's retries and Python warnings are held, then written to
    the command's log file; dots' own lines and anyone's errors still reach the terminal."""
    log = tmp_path / "third_party.log"
    code = f"""
import logging, warnings
logging.basicConfig(level=logging.INFO, format="%(message)s")
from dots.runtime.progress import quiet_third_party, log_third_party
quiet_third_party()
from transformers.utils import logging as tf
tf.get_logger("transformers.configuration_utils").warning("`torch_dtype` is deprecated! Use `dtype` instead!")
logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
warnings.warn("a library's warning")
logging.getLogger("dots.search").info("dots: its own line")
logging.getLogger("urllib3").error("an error shows")
log_third_party(__import__("pathlib").Path({str(log)!r}))
logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
"""
    done = python(["-c", code])
    assert done.returncode == 0, done.stderr
    terminal = done.stdout + done.stderr
    assert "dots: its own line" in terminal and "an error shows" in terminal
    for chatter in ("torch_dtype", "Retrying", "a library's warning", "fontManager"):
        assert chatter not in terminal
        assert chatter in log.read_text()


def test_refusals_come_at_once_without_an_engine_import_or_hub_retries(tmp_path):
    """A missing checkpoint is refused before `engine=auto` imports vLLM (no "engine=auto: using"
    line); the doctor offline reads the Hub cache only: one line, no retry lines."""
    missing = python(["-m", "dots.search", "backbone=custom", f"backbone.base={tmp_path / 'none'}",
                      f"+backbone.sources.sft={tmp_path / 'none2'}", "pool=jsonl", f"pool.path={tmp_path / 'q'}"],
                     cwd=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and "engine=auto" not in missing.stdout + missing.stderr
    assert missing.stderr.strip().splitlines() == [f"error: model path does not exist: {tmp_path / 'none'}"]
    began = time.monotonic()
    offline = python(["-m", "dots.doctor", "backbone=qwen7b", "engine=hf"],
                     env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}, cwd=tmp_path)  # fmt: skip
    assert offline.returncode == 2 and "Retrying" not in offline.stdout + offline.stderr
    assert offline.stderr.strip().splitlines() == [
        "error: cannot read Qwen/Qwen2.5-Math-7B's config.json (offline, and it is not in the Hugging Face cache); "
        "give --shapes"
    ]
    assert time.monotonic() - began < 120  # (the retries alone took ~30 s; imports under load take the rest)


def test_dots_lab_takes_the_shipped_trio_and_says_so(tmp_path):
    """`dots lab` with the defaults: the shipped trio, one line saying so, nothing trained or written."""
    done = python(["-m", "dots.lab", "eval.enabled=false"], env={"DOTS_OUTPUTS": str(tmp_path / "out")})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"lab trio: the one shipped with dots ({REPO / 'dots' / 'data' / 'lab'}), not retrained; " \
                       "--rebuild trains it again"  # fmt: skip
    assert [line.split(":")[0] for line in lines[1:]] == ["base", "sft", "rlvr"]
    assert all(str(REPO / "dots" / "data" / "lab") in line for line in lines[1:])
    assert not (tmp_path / "out").exists()
    bad = python(["-m", "dots.lab", "--model", "dots=/nowhere", "eval.enabled=false"])
    assert bad.returncode == 2 and bad.stdout == "" and "--model dots=/nowhere" in bad.stderr
