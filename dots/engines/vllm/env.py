"""How the processes of a vLLM engine are set up: vLLM imported with its log lines held until the
engine says where they go, CPU threads split between tensor-parallel workers, its log
lines sent to a file or the terminal, and environment variables set while it spawns."""

from __future__ import annotations

import importlib
import json
import logging
import logging.config
import logging.handlers
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

from dots.errors import DotsError
from dots.runtime.environ import environment

__all__ = ["stderr_into", "vllm_available"]

log = logging.getLogger(__name__)
HELD_LINES = 10_000  # vLLM's lines kept before the engine says where its log goes (the rest dropped)


class _Held(logging.handlers.BufferingHandler):
    """Keeps the first HELD_LINES records, never flushes them itself (`_release_held` does)."""

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.buffer) < self.capacity:
            self.buffer.append(record)


_held: _Held | None = None  # those lines, while nobody has said where they go


def import_vllm(module: str = "vllm") -> ModuleType:
    """`import vllm` (or a submodule), the one door dots imports vLLM through. The first one in a
    process keeps vLLM from setting up its logging to the terminal and holds its lines in memory
    (import-time ones such as "Triton is installed but 0 active driver(s) found") until
    `log_to_file` or `log_to_terminal` sends them where engine.log says. Left to vLLM where the
    user configures its logging (VLLM_CONFIGURE_LOGGING or VLLM_LOGGING_CONFIG_PATH set)."""
    global _held
    user_set = {"VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_CONFIG_PATH"} & set(os.environ)
    if "vllm.logger" not in sys.modules and _held is None and not user_set:
        _held = _Held(HELD_LINES)
        vllm_log = logging.getLogger("vllm")
        vllm_log.addHandler(_held)
        vllm_log.setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper())
        vllm_log.propagate = False
        with environment({"VLLM_CONFIGURE_LOGGING": "0"}):  # vllm.logger configures itself when imported
            importlib.import_module("vllm.logger")
    return importlib.import_module(module)


def _release_held(config: dict) -> None:
    """Apply the "vllm" logger's dictConfig, then hand it the lines held since vLLM's import."""
    global _held
    held: list[logging.LogRecord] = []
    if _held is not None:  # taken out first: dictConfig closes the old handlers, and closing empties them
        held = list(_held.buffer)
        logging.getLogger("vllm").removeHandler(_held)
        _held = None
    logging.config.dictConfig(config)
    vllm_log = logging.getLogger("vllm")
    for record in held:
        vllm_log.handle(record)


def vllm_available() -> bool:
    try:
        import_vllm()
    except Exception:
        return False
    return True


def cpu_thread_binding(tensor_parallel_size: int) -> dict[str, str]:
    """vLLM-CPU binds each TP worker to its own NUMA node by default and refuses when there
    are fewer nodes than workers; split this process's CPUs between the workers instead."""
    if tensor_parallel_size <= 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") != "auto":
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < tensor_parallel_size:
        raise DotsError(
            f"tensor_parallel_size={tensor_parallel_size} needs at least as many CPUs; this process has {len(cpus)}"
        )
    share = len(cpus) // tensor_parallel_size
    groups = [cpus[i * share : (i + 1) * share] for i in range(tensor_parallel_size)]
    binding = "|".join(",".join(map(str, g)) for g in groups)
    log.info("vLLM-CPU: binding TP workers to CPUs %s", binding)
    return {"VLLM_CPU_OMP_THREADS_BIND": binding}


def scratch_dir() -> str | None:
    """/dev/shm when writable (temporary checkpoints of swap_weights stay in memory)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


LOG_FORMAT = "%(levelname)s %(asctime)s [%(process)d %(filename)s:%(lineno)d] %(message)s"


def log_to_file(log_file: Path) -> dict[str, str]:
    """Send the "vllm" logger's lines to `log_file` (appended) instead of the terminal: in this
    process now, and in the engine's processes through the environment they are spawned with
    (returned: VLLM_LOGGING_CONFIG_PATH, a dictConfig written next to the log)."""
    log_file = Path(log_file).absolute()
    config = _logging_config({"class": "logging.FileHandler", "filename": str(log_file), "mode": "a"})
    config_file = log_file.with_name(f".{log_file.stem}-logging.json")
    config_file.write_text(json.dumps(config, indent=1))
    _release_held(config)
    return {"VLLM_LOGGING_CONFIG_PATH": str(config_file), "VLLM_CONFIGURE_LOGGING": "1"}


def log_to_terminal() -> None:
    """engine.log=terminal: the "vllm" logger prints to stdout in vLLM's own format, the lines
    held since its import first."""
    _release_held(_logging_config({"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}))


def _logging_config(handler: dict) -> dict:
    """The dictConfig sending the "vllm" logger's lines (INFO and up) to `handler` in LOG_FORMAT."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vllm": {"format": LOG_FORMAT, "datefmt": "%m-%d %H:%M:%S"}},
        "handlers": {"vllm": {**handler, "formatter": "vllm"}},
        "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False}},
    }


@contextmanager
def stderr_into(log_file: Path | None) -> Iterator[None]:
    """While the block runs (vLLM starting its processes, which inherit fd 2), stderr appends to
    `log_file`: a spawned process prints its import-time lines before it reads its logging config
    (vLLM 0.32 sets its logging up only once the engine starts: Python's last-resort handler
    prints them), torch its C++ warnings. Nothing changes where `log_file` is None."""
    if log_file is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)
