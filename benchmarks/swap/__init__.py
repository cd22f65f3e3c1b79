"""How fast is a weight swap? One live engine with θ0 + Σλτ̃ swapped in, against the official
save-and-restart trial, against its memory-traffic floor, per resident form of τ̃, per tensor
class, fused or streaming (results: benchmarks/results/swap.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "latency": Variant(
        "benchmarks.swap.latency", "swap vs save-and-restart per engine and τ̃ mode; --forms, --synthesis"
    ),
    "profile": Variant("benchmarks.swap.profile", "torch.profiler over one swap: where its time goes"),
    "fused": Variant("benchmarks.swap.fused", "the combine fused vs streaming per resident form, on --device"),
}

SMOKE: list[list[str]] = []
SLOW_SMOKE = [
    ["latency", "--engines", "hf", "--shape", "qwen2.5-0.5b", "--vocab", "512", "--layers", "1", "--repeats", "1",
     "--warmup", "0", "--workdir", "{tmp}/swap"],
]  # fmt: skip
