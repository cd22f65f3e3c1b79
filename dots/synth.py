"""DoTS synthesis, Eq. 6: θ(λ) = θ0 + Σ_i λ_i·τ̃_i, one tensor at a time (SPEC §2).

`synthesize` streams (name, tensor) in the base checkpoint's naming and order — the
input of `Engine.swap_weights`, of vLLM's `reload_weights` and of `CheckpointWriter`.
Every call reads the pristine base from disk (never adds then subtracts), sums in
float32 on the chosen device (CUDA when present) and casts each result to the base
tensor's dtype. Tensors outside the task vectors are the base's; an embedding to which
a source added rows gets those rows appended (they are the source's own values).
"""
from __future__ import annotations

from typing import Iterator, Mapping

import torch

from dots.checkpoint import Checkpoint
from dots.errors import DotsError
from dots.taskvec import TaskVectors


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_coefficients(task_vectors: TaskVectors, coefficients: Mapping[str, float]) -> dict[str, float]:
    """Exactly one finite float per source of the cache, else a DotsError."""
    sources = set(task_vectors.sources)
    unknown = sorted(set(coefficients) - sources)
    missing = sorted(sources - set(coefficients))
    if unknown or missing:
        parts = ([f"unknown source(s) {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])
        raise DotsError(f"coefficients must name each source {sorted(sources)} once: {'; '.join(parts)}")
    out = {k: float(v) for k, v in coefficients.items()}
    bad = [k for k, v in out.items() if v != v or v in (float("inf"), float("-inf"))]
    if bad:
        raise DotsError(f"coefficient of {bad[0]} is not finite: {coefficients[bad[0]]}")
    return out


def synthesize(
    task_vectors: TaskVectors,
    coefficients: Mapping[str, float],
    device: str | torch.device | None = None,
    base: Checkpoint | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield θ0 + Σ λ_i τ̃_i for every tensor of the base (copied tensors unchanged).

    Results live on `device` in the base tensor's dtype; a source with λ = 0 is not read.
    """
    lambdas = check_coefficients(task_vectors, coefficients)
    device = torch.device(device) if device is not None else default_device()
    base = base if base is not None else Checkpoint(task_vectors.base_path)
    merged = set(task_vectors.names)
    active = [(k, lam) for k, lam in lambdas.items() if lam != 0.0]
    for name in base.names:
        theta0 = base.get(name)
        if name not in merged:
            yield name, theta0.to(device)
            continue
        out = theta0.to(device=device, dtype=torch.float32)
        for key, lam in active:
            tau = task_vectors.get(key, name).to(device, non_blocking=True)
            if tau.shape != out.shape:
                raise DotsError(f"task vector {key}/{name} has shape {tuple(tau.shape)}, base {tuple(out.shape)}: stale cache?")
            out.add_(tau, alpha=lam)
            del tau
        out = out.to(theta0.dtype)
        extra = task_vectors.extra_rows(name)
        if extra is not None:
            out = torch.cat([out, extra.to(device=device, dtype=out.dtype)], dim=0)
        yield name, out


def synthesize_dict(
    task_vectors: TaskVectors,
    coefficients: Mapping[str, float],
    device: str | torch.device | None = "cpu",
) -> dict[str, torch.Tensor]:
    """The whole merged model as a state dict (small models, tests)."""
    return dict(synthesize(task_vectors, coefficients, device))
