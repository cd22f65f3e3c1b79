"""A memory plan as the lines `python -m dots.plan` and a search print."""

from __future__ import annotations

from dots.plan.decide import MemoryPlan, copies_outputs


def scale(nbytes: float) -> tuple[float, str]:
    """The unit a plan's sizes are printed in: the largest of GB, MB and kB the model reaches."""
    return next(((u, n) for u, n in ((1e9, "GB"), (1e6, "MB")) if nbytes >= u), (1e3, "kB"))


def count(params: float) -> str:
    """A parameter count in the unit that fits it: 7.62 B, 1.23 M, 4.10 K."""
    unit, name = next(((u, n) for u, n in ((1e9, "B"), (1e6, "M")) if params >= u), (1e3, "K"))
    return f"{params / unit:.2f} {name}"


def describe(plan: MemoryPlan) -> list[str]:
    """Per device: engine weights, KV cache, reserve, τ̃ resident and from the cache, the choice (and vLLM's share)."""
    unit, units = scale(plan.shapes.nbytes)
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
            f"θ0 {held[0] / unit:.2f} + {plan.sources} τ̃ {held[1] / unit:.2f} + set-up or swap buffers "
            f"{(plan.resident - sum(held)) / unit:.2f} (this worker's shard: / tensor_parallel_size {tp})"
        )
    else:
        extra = plan.resident - theta0 - plan.tau
        copied = copies_outputs(s, plan.shapes, plan.resident_form)
        how = "one output per tensor, copied in" if copied else "written into the parameters"
        resident = (
            f"θ0 {theta0 / unit:.2f} + {plan.sources} τ̃ {plan.tau / unit:.2f} + outputs and scratch "
            f"{extra / unit:.2f} (whole model; {how})"
        )
    out = [
        f"memory plan: {plan.shapes.name} ({count(plan.shapes.params)} parameters), {plan.sources} sources "
        f"at density {plan.density:g}; engine {s.name} on {s.device}, {groups} of {m.total / 1e9:.1f} GB, "
        f"{m.free / 1e9:.1f} GB free ({m.how}); per device:",
        f"  engine weights     {plan.weights / unit:8.2f} {units}  the model in {dtype} "
        f"/ tensor_parallel_size {s.tensor_parallel}",
        f"  engine KV cache    {plan.kv / unit:8.2f} {units}  at least {plan.kv_tokens} tokens ({plan.kv_note})",
        f"  engine reserve     {plan.reserve / unit:8.2f} {units}  activations, CUDA context, graphs",
        f"  τ̃ resident         {plan.resident / unit:8.2f} {units}  {plan.resident_form or 'bitmask'} form: {resident}",
        "  τ̃ resident forms   "
        + " · ".join(
            f"{f} {held / unit:.2f} {units} (τ̃ {tau / shard / unit:.2f})" for f, (tau, held) in plan.forms.items()
        )
        + f"  fastest first; per parameter and source: 4, ≈ 8 × {d}, ≈ (4 + itemsize) × {d}, ≈ 1/8 + {d} × itemsize",
        f"  τ̃ from the cache   {plan.stream / unit:8.2f} {units}  one tensor at a time; each swap reads θ0 "
        f"{theta0 / unit:.2f} + τ̃ {plan.forms['bitmask'][0] / unit:.2f} {units} from the cache "
        "(page cache when the host holds them)",
        f"  → synth_cache={plan.synth_cache}"
        + (f", resident_form={plan.resident_form}" if plan.resident_form else "")
        + f": {plan.reason}",
    ]
    if plan.utilization is not None:
        kv = plan.utilization * m.total - plan.weights - plan.reserve
        per_token = plan.kv / max(plan.kv_tokens, 1)
        out.append(
            f"  → vLLM gpu_memory_utilization {plan.utilization:.2f}: its KV cache ≈ {kv / 1e9:.1f} GB "
            f"≈ {kv / per_token / 1e3:.0f}k tokens" + ("" if s.utilization is None else " (as configured)")
        )
    return out
