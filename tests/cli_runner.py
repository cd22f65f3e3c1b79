"""Run `python -m dots.<verb> ARGS` many times without paying Python's and torch's import each time.

The runner imports torch, Hydra, transformers and dots' heavy modules once, then reads one
JSON request per line on stdin ({"module", "argv", "cwd", "timeout"}) and answers one JSON
line on stdout ({"rc", "stdout", "stderr", "timed_out"}). Each request is served by a child
forked from the warm runner, which does what `python -m MODULE ARGS` does:

- `runpy.run_module(MODULE, run_name="__main__", alter_sys=True)` is `python -m`'s own
  machinery (`runpy._run_module_as_main` differs only in reusing the interpreter's `__main__`
  module object): the package is imported, `MODULE.__main__` runs as `__main__`, with
  `sys.argv = [its file, *ARGS]`, and `sys.path[0]` is the working directory;
- an uncaught exception leaves the child through the interpreter's top level (traceback on
  stderr, exit code 1), `sys.exit(n)` ends it with n, and the interpreter's normal shutdown
  (atexit handlers, flushing) runs, as for `python -m`;
- stdin is /dev/null, stdout and stderr are files, the child leads its own process group (a
  hung command is killed whole after `timeout` seconds and reported as `timed_out`; `cpu_s`
  is the CPU time it used).

What the child shares with the runner is only the state that importing modules creates, the
same for every request; the runner never imports a `__main__` module (runpy would warn) and
runs no torch op before forking. The imported objects are frozen out of the garbage collector
while the command runs (a child's collections would otherwise touch, and copy, all of them)
and unfrozen when it exits, so its shutdown collects and finalizes everything, as python -m's.
The environment (DOTS_OUTPUTS, HF_HOME, TMPDIR, ...) is the runner's, fixed when it starts:
huggingface_hub reads HF_HOME at import, as it would in a fresh `python -m`; a request's own
"env" is added in its child only (the crash-point injector's settings, tests/crash_points.py,
which the child rearms). With DOTS_RUNNER_KEEP_COMPOSED=1 a configuration a child composed is
kept by the runner (a pickle the child leaves) and handed ready-made to later children with the
same command line: composing writes nothing, and it is most of a lab merge's time.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import ctypes
import gc
import json
import os
import pickle
import resource
import runpy
import signal
import sys
import tempfile
import time

PRELOAD = (
    "torch",
    "omegaconf",
    "hydra",
    "transformers",
    "pyarrow.parquet",
    "dots.options.compose",
    "dots.options.cli",
    "dots.io.problems",
    "dots.io.checkpoint",
    "dots.io.align",
    "dots.search.pipeline",
    "dots.merge.executor",
    "dots.merge.methods",
    "dots.evaluate.run",
    "dots.engines.factory",
    "dots.engines.hf",
    "dots.plan.search",
    "dots.plan.decide",
    "dots.search.study.samplers",
    "dots.search.selection",
    "dots.search.pick.pareto",
    "dots.evaluate.benchmarks",
    "transformers.generation.utils",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.auto.modeling_auto",
    "optuna",
    "hydra._internal.hydra",
    "hydra._internal.utils",
    "hydra._internal.core_plugins.basic_launcher",
    "hydra._internal.core_plugins.basic_sweeper",
    "hydra._internal.core_plugins.file_config_source",
    "hydra._internal.core_plugins.importlib_resources_config_source",
    "hydra._internal.core_plugins.structured_config_source",
    "hydra._internal.logging_config",
    "dots.engines.vllm.engine",
    "dots.runtime.reaper",
    "dots.export.card",
    "dots.merge.fisher",
    *(f"dots.merge.methods.{m}" for m in ("dare", "dots_fixed", "linear", "ram", "sar", "task_arithmetic", "ties")),
    "hydra_plugins",
)
# installed only with some extras (hydra_plugins: the slurm extra's launcher): preloaded where
# present, so that the runner starts in the README's plain `pip install -e .[test]` too
OPTIONAL = {"hydra_plugins"}


def _child(request: dict, out: str, err: str) -> None:
    """Become `python -m MODULE ARGS` (never returns: the interpreter exits as python -m's would)."""
    os.setpgid(0, 0)
    atexit.register(gc.unfreeze)  # registered first, runs last: shutdown collects everything, as python -m's does
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.environ.update(request.get("env", {}))
    rearm = getattr(ctypes.CDLL(None), "dots_fault_configure", None)  # the injector, when preloaded
    if rearm is not None:
        rearm()
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()
    sys.argv = [request["module"], *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    sys.exit(0)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code (as `subprocess` gives it), and whether it had to be killed."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), True
        time.sleep(0.01)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Composed:
    """The configurations children composed (DOTS_RUNNER_KEEP_COMPOSED=1), handed to later children."""

    def __init__(self, spill: str):
        import dots.options.compose as composing

        self.spill, self.kept, self.real = spill, {}, composing.compose
        composing.compose = self.compose

    def compose(self, name, overrides, check=True):
        key = (name, tuple(overrides), check)
        if key not in self.kept:  # (in a child: left for the runner in the spill file)
            self.kept[key] = self.real(name, overrides, check)
            with open(self.spill, "wb") as fh:
                pickle.dump((key, self.kept[key]), fh)
        return copy.deepcopy(self.kept[key])

    def take(self) -> None:
        """In the runner, after a child: keep what it composed."""
        with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError):
            with open(self.spill, "rb") as fh:
                key, config = pickle.load(fh)
            self.kept[key] = config
            os.unlink(self.spill)


def serve() -> None:
    """Answer requests until stdin closes."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if name not in OPTIONAL or exc.name != name:
                raise
    io_dir = tempfile.mkdtemp(prefix="dots-cli-runner-", dir=os.environ.get("DOTS_RUNNER_IO"))
    keep = Composed(os.path.join(io_dir, "composed")) if os.environ.get("DOTS_RUNNER_KEEP_COMPOSED") else None
    gc.collect()
    gc.freeze()  # the imported objects: never traversed (nor copied on write) by a child's collector
    out, err = os.path.join(io_dir, "stdout"), os.path.join(io_dir, "stderr")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, out, err)
        cpu = _children_cpu()
        code, timed_out = _wait(pid, float(request.get("timeout", 120)))
        if keep is not None:
            keep.take()
        with open(out, errors="replace") as fo, open(err, errors="replace") as fe:
            reply = {"rc": code, "stdout": fo.read(), "stderr": fe.read(), "timed_out": timed_out}
        reply["cpu_s"] = round(_children_cpu() - cpu, 3)
        print(json.dumps(reply), flush=True)
    gc.unfreeze()


class Runner:
    """The client: a runner started with `env` added to this process's environment."""

    def __init__(self, env: dict[str, str] | None = None):
        import subprocess

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.pathsep.join(filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(here, "cli_runner.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
        )
        assert json.loads(self.proc.stdout.readline())["ready"]  # type: ignore[union-attr]

    def run(self, module: str, argv: list[str], cwd: str, timeout: float = 300, **env: str) -> dict:
        """`python -m module argv` in `cwd` with `env` added: {"rc", "stdout", "stderr", "timed_out", "cpu_s"}."""
        request = {"module": module, "argv": argv, "cwd": cwd, "timeout": timeout, "env": env}
        self.proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=60)


if __name__ == "__main__":
    serve()
