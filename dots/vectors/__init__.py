"""Task vectors: τ_i = θ_i − θ0 read once (`deltas`), exact top-k (`topk`, `masks`), sparsify
and rescale (`sparsify`, DoTS Eq. 3), the τ̃ cache (`cache`) in compact form (`compact`: θ_i's
values at the mask, rebuilt against θ0) and the synthesis θ0 + Σ λ_i τ̃_i (`synth`, Eq. 6)."""

from dots.vectors.cache import TaskVectors, build_task_vectors
from dots.vectors.sparsify import SparsifyConfig
from dots.vectors.synth import ResidentSynthesizer, synthesize

__all__ = ["ResidentSynthesizer", "SparsifyConfig", "TaskVectors", "build_task_vectors", "synthesize"]
