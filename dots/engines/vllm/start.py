"""What a `vllm.LLM` is started with: its keyword arguments and environment from the engine's
options (its share of memory, tensor parallelism, where its log lines go, `extra_args` last)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dots.engines.vllm.env import cpu_thread_binding, log_to_file, log_to_terminal
from dots.options.engine import EngineOptions

WORKER_EXTENSION = "dots.engines.vllm.worker.DotsWorkerExtension"
CPU_MEMORY_UTILIZATION = 0.3  # vLLM-CPU: share of the NUMA node's memory; 0.92 does not fit here
GPU_MEMORY_UTILIZATION = 0.9


def llm_arguments(
    model_path: Path, options: EngineOptions, on_cpu: bool, log_dir: str | Path | None
) -> tuple[dict[str, Any], dict[str, str], Path | None]:
    """(`vllm.LLM` keyword arguments, environment variables to start it in, its log file or None):
    `gpu_memory_utilization` null is 0.3 on vLLM-CPU (of the NUMA node's memory) and 0.9 on a GPU;
    with `log_dir` and `log: file` vLLM's log lines go to <log_dir>/vllm.log and its loading bar is
    off, else to the terminal (with the lines vLLM printed when imported, held until now)."""
    utilization = options.gpu_memory_utilization
    if utilization is None:
        utilization = CPU_MEMORY_UTILIZATION if on_cpu else GPU_MEMORY_UTILIZATION
    env = cpu_thread_binding(options.tensor_parallel_size) if on_cpu else {}
    to_file = options.log == "file" and log_dir is not None
    log_file = Path(log_dir) / "vllm.log" if log_dir is not None and to_file else None
    if log_file is not None:
        env.update(log_to_file(log_file))
        print(f"vLLM's log: {log_file} (engine.log=terminal shows it here)")
    else:
        log_to_terminal()
    kwargs: dict[str, Any] = dict(
        model=str(model_path),
        tensor_parallel_size=options.tensor_parallel_size,
        gpu_memory_utilization=float(utilization),
        dtype=options.dtype,
        enforce_eager=options.enforce_eager,
        seed=options.seed,
        worker_extension_cls=WORKER_EXTENSION,
    )
    optional = {
        "max_model_len": options.max_model_len,
        "max_num_seqs": options.max_num_seqs,
        "enable_prefix_caching": options.enable_prefix_caching,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if to_file:
        kwargs["use_tqdm_on_load"] = False  # its weight-loading bar, too (extra_args may turn it on)
    kwargs.update(options.extra_args)
    return kwargs, env, log_file
