"""A memory plan as the lines `python -m dots.plan` and a search print."""

from __future__ import annotations

from pathlib import Path

from dots.checks import check_choice
from dots.plan.decide import MemoryPlan, copies_outputs, size

__all__ = ["announce", "brief", "count", "describe"]

SHOW_PLAN = ("brief", "full")  # search.yaml `show_plan`: what the search prints of its plan


def count(params: float) -> str:
    """A parameter count in the unit that fits it: 7.62 B, 1.23 M, 4.10 K."""
    unit, name = next(((u, n) for u, n in ((1e9, "B"), (1e6, "M")) if params >= u), (1e3, "K"))
    return f"{params / unit:.2f} {name}"


def describe(plan: MemoryPlan) -> list[str]:
    """Per device: engine weights, KV cache, reserve, τ̃ resident and from the cache, the choice (and vLLM's share)."""
    s, m = plan.setting, plan.memory
    dtype = str(plan.dtype).replace("torch.", "")
    d = f"{plan.density:g}"
    groups = f"{s.tensor_parallel} devices" if s.tensor_parallel > 1 else "1 device"
    theta0 = plan.shapes.nbytes
    shard = max(1, s.tensor_parallel) if s.name == "vllm" else 1  # a vLLM worker holds its shard of τ̃
    outputs = sum(plan.shapes.tensors[n].nbytes + plan.shapes.extra_bytes(n) for n in plan.shapes.merged)
    if s.name == "vllm":  # each worker: its shard of the merged tensors, written into its parameters
        tp = max(1, s.tensor_parallel)
        held = (outputs // tp, plan.tau // tp)
        resident = (
            f"θ0 {size(held[0])} + {plan.sources} τ̃ {size(held[1])} + set-up or swap buffers "
            f"{size(plan.resident - sum(held))} (this worker's shard: / tensor_parallel_size {tp})"
        )
    else:
        extra = plan.resident - theta0 - plan.tau
        copied = copies_outputs(s, plan.shapes, plan.resident_form)
        how = "one output per tensor, copied in" if copied else "written into the parameters"
        resident = (
            f"θ0 {size(theta0)} + {plan.sources} τ̃ {size(plan.tau)} + outputs and scratch "
            f"{size(extra)} (whole model; {how})"
        )
    out = [
        f"memory plan: {plan.shapes.name} ({count(plan.shapes.params)} parameters), {plan.sources} sources "
        f"at density {plan.density:g}; engine {s.name} on {s.device}, {groups} of {m.total / 1e9:.1f} GB, "
        f"{m.free / 1e9:.1f} GB free ({m.how}); per device:",
        f"  engine weights     {size(plan.weights):>11}  the model in {dtype} "
        f"/ tensor_parallel_size {s.tensor_parallel}",
        f"  engine KV cache    {size(plan.kv):>11}  at least {plan.kv_tokens} tokens ({plan.kv_note})",
        f"  engine reserve     {size(plan.reserve):>11}  "
        + ("activations, CUDA context, graphs" if s.device.startswith("cuda") else "activations and the engine's own"),
        f"  τ̃ resident         {size(plan.resident):>11}  {plan.resident_form or 'bitmask'} form: {resident}",
        "  τ̃ resident forms   "
        + " · ".join(f"{f} {size(held)} (τ̃ {size(tau / shard)})" for f, (tau, held) in plan.forms.items())
        + f"  fastest first; per parameter and source: 4, ≈ 8 × {d}, ≈ (4 + itemsize) × {d}, ≈ 1/8 + {d} × itemsize",
        f"  τ̃ from the cache   {size(plan.stream):>11}  one tensor at a time; each swap reads θ0 "
        f"{size(theta0)} + τ̃ {size(plan.forms['bitmask'][0])} from the cache "
        "(page cache when the host holds them)",
        choice_line(plan),
    ]
    if plan.utilization is not None:
        kv = plan.utilization * m.total - plan.weights - plan.reserve
        per_token = plan.kv / max(plan.kv_tokens, 1)
        out.append(
            f"  → vLLM gpu_memory_utilization {plan.utilization:.2f}: its KV cache ≈ {kv / 1e9:.1f} GB "
            f"≈ {kv / per_token / 1e3:.0f}k tokens" + ("" if s.utilization is None else " (as configured)")
        )
    return out


def choice_line(plan: MemoryPlan) -> str:
    """Where τ̃ lives and why: `  → synth_cache=memory, resident_form=dense: <reason>`."""
    form = f", resident_form={plan.resident_form}" if plan.resident_form else ""
    return f"  → synth_cache={plan.synth_cache}{form}: {plan.reason}"


def brief(plan: MemoryPlan, details: Path | None = None) -> list[str]:
    """Two lines: the model and what the engine takes; where τ̃ lives and why (`details`: the file of the rest)."""
    s = plan.setting
    devices = f", per device of {s.tensor_parallel}" if s.tensor_parallel > 1 else ""
    more = f"; every figure: {details} (show_plan=full prints them)" if details else ""
    return [
        f"memory plan: {count(plan.shapes.params)} parameters, {plan.sources} sources; engine {s.name} on {s.device}"
        f"{devices}: weights {size(plan.weights)} + KV cache {size(plan.kv)} + reserve {size(plan.reserve)}",
        choice_line(plan) + more,
    ]


def announce(plan: MemoryPlan, show: str, details: Path | None = None) -> list[str]:
    """The plan as a search prints it: `brief` (two lines, `details` naming the file of the rest) or `full`."""
    return describe(plan) if check_choice(show, SHOW_PLAN, "show_plan") == "full" else brief(plan, details)
