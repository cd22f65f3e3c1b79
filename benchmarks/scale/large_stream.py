"""Per tensor class timing of a swap for benchmarks/scale/large.py `classes`: the (name, tensor)
stream an engine consumes wrapped so that each tensor's synthesis and consumption are timed
(and its working set measured), and the table per class (embedding, lm_head, attention, MLP,
norms, biases)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any, Iterable, Iterator

from benchmarks.harness.memory import reset_peak, status_kb

CLASSES = (
    "embedding",
    "lm_head",
    "attention q",
    "attention k",
    "attention v",
    "attention q/k/v (fused)",
    "attention o",
    "MLP gate",
    "MLP up",
    "MLP gate/up (fused)",
    "MLP down",
    "norms",
    "biases",
)


def tensor_class(name: str) -> str:
    if name.endswith(".bias"):
        return "biases"
    for key, label in (
        ("embed_tokens", "embedding"),
        ("lm_head", "lm_head"),
        ("qkv_proj", "attention q/k/v (fused)"),
        ("gate_up_proj", "MLP gate/up (fused)"),
        ("q_proj", "attention q"),
        ("k_proj", "attention k"),
        ("v_proj", "attention v"),
        ("o_proj", "attention o"),
        ("gate_proj", "MLP gate"),
        ("up_proj", "MLP up"),
        ("down_proj", "MLP down"),
        ("norm", "norms"),
    ):
        if key in name:
            return label
    return "other"


class StreamTimer:
    """Wraps the (name, tensor) stream a swap consumes: per name, the seconds spent producing
    it (synthesis) and the seconds the consumer spent on it before asking for the next."""

    def __init__(self, measure_memory: bool = False):
        self.synth: dict[str, list[float]] = defaultdict(list)
        self.consume: dict[str, list[float]] = defaultdict(list)
        self.peak_mib: dict[str, list[float]] = defaultdict(list)
        self.measure_memory = measure_memory
        self.idle_kb = 0

    def wrap(self, items: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        it = iter(items)
        while True:
            if self.measure_memory:
                reset_peak()
            t0 = time.perf_counter()
            try:
                name, tensor = next(it)
            except StopIteration:
                return
            self.synth[name].append(time.perf_counter() - t0)
            if self.measure_memory:
                self.peak_mib[name].append((status_kb("self", "VmHWM") - self.idle_kb) / 1024)
            t1 = time.perf_counter()
            yield name, tensor
            self.consume[name].append(time.perf_counter() - t1)
            del tensor


ORIGINAL: dict[str, Any] = {}


def patch_synthesis(timer: StreamTimer) -> None:
    """Make every synthesis the engines run go through `timer`: `synthesize` (they import it at
    call time) and `ResidentSynthesizer.__call__` (a class attribute, looked up at each call)."""
    import dots.vectors.synth as synth

    ORIGINAL.setdefault("synthesize", synth.synthesize)
    ORIGINAL.setdefault("resident", synth.ResidentSynthesizer.__call__)

    def synthesize(*a, **kw):
        return timer.wrap(ORIGINAL["synthesize"](*a, **kw))

    def resident(self, coefficients, **options):  # options: `into` (the transformers engine's live tensors)
        return timer.wrap(ORIGINAL["resident"](self, coefficients, **options))

    synth.synthesize = synthesize
    synth.ResidentSynthesizer.__call__ = resident  # type: ignore[method-assign]


def patch_sharded(timer: StreamTimer, info: dict[str, tuple[int, int, int]]) -> None:
    """Time vLLM's resident swap in its parameters' layout (`ShardedResident`), which writes
    each parameter straight from θ0 and the compact τ̃ (no tensor stream): per parameter the
    seconds of `_combine`; `info` gets each parameter's (entries, θ0 bytes, compact τ̃ bytes)."""
    from dots.engines.vllm.resident import ShardedResident

    ORIGINAL.setdefault("combine", ShardedResident._combine)

    def combine(self, r, lambdas, out):
        t0 = time.perf_counter()
        result = ORIGINAL["combine"](self, r, lambdas, out)
        name = r.unit.name
        timer.synth[name].append(time.perf_counter() - t0)
        timer.consume[name].append(0.0)
        info[name] = (
            r.theta0.numel(),
            r.theta0.numel() * r.theta0.element_size(),
            sum(ct.nbytes for ct in r.taus if ct is not None),
        )
        return result

    ShardedResident._combine = combine  # type: ignore[method-assign]


def class_table(
    timer: StreamTimer, info: dict[str, tuple[int, int, int]], swaps: list[float], consumer: str, k: int
) -> list[str]:
    """Medians over swaps of the per-class sums; `info`: name -> (entries, bytes of the base tensor,
    bytes of the K compact τ̃)."""
    per_swap: dict[str, list[list[float]]] = defaultdict(lambda: [[], []])
    n = len(swaps)
    groups: dict[str, list[str]] = defaultdict(list)
    for name in info:
        groups[tensor_class(name)].append(name)
    lines = [
        f"| class | tensors | entries (M) | θ0 + {k} compact τ̃ (GB) | synthesis (s) | {consumer} (s) "
        "| class total (s) | share of the swap | peak RSS above idle while built (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    total_synth = total_consume = 0.0
    swap = statistics.median(swaps)
    for label in [*CLASSES, "other"]:
        names = groups.get(label)
        if not names:
            continue
        # a tensor no swap produced (no source changes it: not written) counts 0
        synth = statistics.median(sum(timer.synth.get(nm, [0.0] * n)[i] for nm in names) for i in range(n))
        consume = statistics.median(sum(timer.consume.get(nm, [0.0] * n)[i] for nm in names) for i in range(n))
        total_synth += synth
        total_consume += consume
        entries = sum(info[nm][0] for nm in names)
        read = sum(info[nm][1] + info[nm][2] for nm in names) / 1e9
        peak = max((max(timer.peak_mib[nm]) for nm in names if timer.peak_mib.get(nm)), default=None)
        lines.append(
            f"| {label} | {len(names)} | {entries / 1e6:.1f} | {read:.2f} | {synth:.3f} | {consume:.3f} "
            f"| {synth + consume:.3f} | {(synth + consume) / swap:.0%} "
            f"| {'—' if peak is None else f'{peak:.0f}'} |"
        )
        per_swap[label]  # keep the order
    rest = swap - total_synth - total_consume
    lines.append(f"| after the last tensor (engine's own) | | | | | | {rest:.3f} | {rest / swap:.0%} | |")
    lines.append(
        f"| **whole swap** (median of {n}) | | | | **{total_synth:.3f}** | **{total_consume:.3f}** "
        f"| **{swap:.3f}** | 100% | |"
    )
    return lines
