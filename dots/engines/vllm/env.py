"""How the processes of a vLLM engine are set up: whether vLLM is importable and on CPU,
CPU threads split between tensor-parallel workers, its log
lines sent to a file, and environment variables set while it spawns."""

from __future__ import annotations

import json
import logging
import logging.config
import os
from pathlib import Path

from dots.errors import DotsError

log = logging.getLogger(__name__)


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def on_cpu_platform() -> bool:
    """vLLM runs on CPU (`dots.engines.vllm.compat.on_cpu_platform`)."""
    from dots.engines.vllm.compat import on_cpu_platform as on_cpu

    return on_cpu()


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
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vllm": {"format": LOG_FORMAT, "datefmt": "%m-%d %H:%M:%S"}},
        "handlers": {
            "vllm": {"class": "logging.FileHandler", "formatter": "vllm", "filename": str(log_file), "mode": "a"}
        },
        "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False}},
    }
    config_file = log_file.with_name(f".{log_file.stem}-logging.json")
    config_file.write_text(json.dumps(config, indent=1))
    logging.config.dictConfig(config)
    return {"VLLM_LOGGING_CONFIG_PATH": str(config_file), "VLLM_CONFIGURE_LOGGING": "1"}
