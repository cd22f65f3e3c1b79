"""The doctor's end-to-end check: a small random model of the backbone's architecture is
generated (nothing is downloaded), two sources derived from it, their task vectors built, the
configured engine started on it, its swap canary run, and three swaps timed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dots.doctor.checks import Row
from dots.errors import DotsError
from dots.io.metadata import check_config, read_json
from dots.options.engine import EngineOptions
from dots.options.search import PlanOptions
from dots.runtime.timing import DeviceTimer, device_of

if TYPE_CHECKING:
    from dots.engines.base import Engine

TINY = dict(hidden_size=64, num_heads=2, num_kv_heads=1, intermediate_size=128)  # head_dim 32: vLLM-CPU's least
SWAPS = (0.3, 0.7, 1.0)  # λ of every source in the three timed swaps
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def architecture(options: PlanOptions, shapes_file: str | None) -> dict:
    """The backbone's config.json: `--shapes`, the local base's, or a Hub base's (that one small
    file, never the weights)."""
    if shapes_file:
        path = Path(shapes_file)
        path = path / "config.json" if path.is_dir() else path
    else:
        base = options.base
        if Path(base).expanduser().is_dir():
            path = Path(base).expanduser() / "config.json"
        else:
            from huggingface_hub import hf_hub_download

            reachable = hub_reachable()  # offline: the cache only, without huggingface_hub's five retries
            try:
                local = not reachable
                path = Path(hf_hub_download(base, "config.json", revision=options.revision, local_files_only=local))
            except Exception as exc:  # offline, unknown repo
                first = str(exc).splitlines()[0] if reachable else "offline, and it is not in the Hugging Face cache"
                raise DotsError(f"cannot read {base}'s config.json ({first}); give --shapes") from None
    return check_config(read_json(path, "config"), path)  # one line naming the file and the field


def hub_reachable() -> bool:
    """Whether the Hub can be asked at all: not HF_HUB_OFFLINE, and its host name resolves (a
    machine without a network fails here at once, where a download would retry for ~30 s)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname or "huggingface.co", 443)
    except OSError:
        return False
    return True


def generate(config: dict, out: Path, shape: str, layers: int, sources: list[str]) -> tuple[Path, dict[str, Path]]:
    """A random model of `config`'s architecture with `layers` layers — its own widths with
    shape "real", else tiny ones — and one seeded fine-tune of it per source (the last sparse)."""
    from dots.testing import make_finetuned, make_tiny_model

    arch = str(config.get("model_type"))
    if arch not in ("qwen2", "llama"):
        raise DotsError(f"the doctor generates qwen2 and llama models, not {arch!r}")
    if shape == "real":
        heads = int(config["num_attention_heads"])
        widths = dict(
            hidden_size=int(config["hidden_size"]),
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            intermediate_size=int(config["intermediate_size"]),
        )
        dtype = DTYPES.get(str(config.get("torch_dtype") or config.get("dtype")), torch.bfloat16)
    else:
        widths, dtype = dict(TINY), torch.bfloat16  # what vLLM-CPU computes in: its fast path is covered
    tied = bool(config.get("tie_word_embeddings", False))
    base = make_tiny_model(out / "base", arch=arch, dtype=dtype, tie_word_embeddings=tied, num_layers=layers, **widths)
    made = {
        key: make_finetuned(base, out / f"source-{i}", seed=i + 1, scale=0.02, density=0.3 if i else 1.0)
        for i, key in enumerate(sources)
    }
    return base, made


def describe(config: dict, shape: str, layers: int) -> str:
    widths = {k: config.get(k) for k in ("hidden_size", "intermediate_size", "num_attention_heads")}
    if shape != "real":
        widths = {"hidden_size": TINY["hidden_size"], "intermediate_size": TINY["intermediate_size"]}
    tied = ", tied head" if config.get("tie_word_embeddings") else ""
    return f"{config.get('model_type')} {shape} shapes, {layers} layers, {widths}{tied} (char vocabulary)"


def light_engine(options: EngineOptions) -> EngineOptions:
    """The configured engine (`auto` resolved), started light on vLLM-CPU (eager, a small KV share)."""
    from dots.engines.factory import resolve_engine

    options = resolve_engine(options)
    if options.name == "vllm":
        from dots.engines.vllm.compat import on_cpu_platform

        if on_cpu_platform():
            share = options.gpu_memory_utilization
            options = options.with_(enforce_eager=True, gpu_memory_utilization=0.1 if share is None else share)
    return options


def end_to_end(options: PlanOptions, config: dict, shape: str, layers: int, workdir: Path) -> list[Row]:
    """Rows: the generated model, engine start, canary, swap path, three timed swaps."""
    from dots.engines.canary import run_canary
    from dots.engines.factory import build_engine
    from dots.io.checkpoint import Checkpoint
    from dots.vectors.cache import build_task_vectors

    keys = list(options.sources) or ["a", "b"]
    rows = [Row("model", "info", describe(config, shape, layers))]
    base, made = generate(config, workdir / "models", shape, layers, keys)
    tv = build_task_vectors(
        Checkpoint(base),
        {k: Checkpoint(p) for k, p in made.items()},
        options.sparsify,
        workdir / "cache",
    )
    engine_options = light_engine(options.engine)
    began = time.perf_counter()
    try:
        engine = build_engine(engine_options, base, tv, log_dir=workdir)
    except Exception as exc:
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return rows + [Row("engine start", "FAIL", failure, _todo(engine_options))]
    try:
        tp = engine_options.tensor_parallel_size
        start = f"{type(engine).__name__} in {time.perf_counter() - began:.1f} s" + (f", TP={tp}" if tp > 1 else "")
        rows.append(Row("engine start", "ok", start + _compiled(engine)))
        rows += _canary_and_swaps(engine, keys, workdir, run_canary)
    finally:
        engine.close()
    return rows


def _canary_and_swaps(engine: Engine, keys: list[str], workdir: Path, run_canary: Any) -> list[Row]:
    try:
        canary = run_canary(engine, keys, workdir)
    except DotsError as exc:
        return [Row("swap canary", "FAIL", str(exc), "swaps do not reach the model: report it with this output")]
    rows = []
    if canary.verdict == "passed":
        rows.append(Row("swap canary", "ok", f"passed in {canary.seconds:.1f} s (tolerance {canary.tolerance:g})"))
    else:
        rows.append(
            Row(
                "swap canary",
                "FAIL",
                f"{canary.verdict}: {canary.failures[0]}",
                "the fast swap does not reach the model here; runs fall back to the public path (slower): "
                "report it, or install the tested vLLM range",
            )
        )
    times = []
    for value in SWAPS:
        with DeviceTimer(device_of(engine)) as swap:  # until the device has finished it
            engine.swap_coefficients(dict.fromkeys(keys, value))
        times.append(swap.seconds * 1e3)
    path = engine.swap_path
    rows.append(Row("swap path", "ok" if path == "fast" else "warn", f"swap path: {path}{_layout(engine)}"))
    rows.append(Row("swaps", "ok", "swaps " + "/".join(f"{t:.0f}" for t in times) + f" ms (λ = {SWAPS})"))
    return rows


def _layout(engine: Engine) -> str:
    """Where the engine holds τ̃: transformers, its resident form; vLLM, its workers' layout (the
    parameters': written in place; the checkpoint's: reloaded, and why) and form."""
    info = getattr(engine, "resident_info", None)
    if not callable(info):
        return ""
    held = info()
    if isinstance(held, dict):  # transformers: one process, {"form": …, "nbytes": …}
        return f" (τ̃ resident in the {held['form']} form)" if held.get("form") else " (τ̃ read from the cache)"
    layouts = sorted({str(w.get("layout")) for w in held})
    forms = sorted({str(w["form"]) for w in held if w.get("form")})
    note = next((w["note"] for w in held if w.get("note")), "")
    form = f", {'/'.join(forms)} form" if forms else ""
    return f" (τ̃ resident in the {'/'.join(layouts)} layout{form}{': ' + note if note else ''})"


def _compiled(engine: Any) -> str:
    """ ", fused swap pass compiled in 12.3 s" where the start compiled it (#38), else nothing."""
    info = getattr(engine, "resident_info", None)
    held = info() if callable(info) else {}
    workers = held if isinstance(held, list) else [held]
    seconds = max((float(w.get("compile_s") or 0.0) for w in workers if w.get("fused")), default=0.0)
    return f", fused swap pass compiled in {seconds:.1f} s" if seconds else ""


def _todo(options: EngineOptions) -> str:
    if options.name == "vllm":
        return "see <workdir>/vllm.log (--keep); engine=hf runs without vLLM"
    return "check the torch / transformers install (python -c 'import transformers')"
