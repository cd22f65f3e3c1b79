"""Streaming merge executor and the `python -m dots.merge` CLI (SPEC §5).

For each tensor name (in the base's order) it reads the base and every source, forms
τ_i = θ_i − θ0 in float32, calls the method, writes θ0 + δ cast to the base dtype at
its planned offset (`CheckpointWriter`) and frees everything before the next name.
A tensor above `block_entries` (2^24) entries — the embedding, a 7B MLP — is read,
merged and written in row blocks when the method is blockwise (all but SAR and
dots_fixed; TIES and RAM-per-tensor first gather their per-tensor facts in a pass over
the blocks), with the same bits as a whole-tensor merge. So the resident set is about
(K + 4) float32 blocks plus the largest tensor below the block size and a fixed
overhead, whatever the model's size or width. Methods with whole-model statistics get
a first pass over the same (blocked) stream before the writing pass.

    python -m dots.merge method=ties backbone.base=DIR_OR_ID \
        +backbone.sources.sft=DIR +backbone.sources.rlvr=DIR output=DIR [overwrite=true]

Sources named on the command line replace the backbone's own sources; a bad input
(missing or non-model path, mismatched architecture/shapes/tensors, NaN/Inf, bad
option, unknown method, existing output) ends with one `error:` line, exit code 2
and nothing written at the output path.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from dots.checkpoint import Checkpoint, CheckpointWriter, all_finite
from dots.errors import DotsError, cli_errors
from dots.methods import MergeContext, build_options, get_method
from dots.methods.base import WHOLE, Part
from dots.progress import progress_bar

log = logging.getLogger(__name__)

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30


# --- reading ----------------------------------------------------------------------------

BLOCK_ENTRIES = 1 << 24  # a tensor larger than this is merged in row blocks of about this many entries


def row_blocks(shape: Sequence[int], block_entries: int = BLOCK_ENTRIES) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) covering a tensor, each about `block_entries` entries; one range
    (the whole tensor) when it is not larger than that or has no rows."""
    if not shape or math.prod(shape) <= block_entries:
        return [(0, shape[0] if shape else 0)]
    per_row = math.prod(shape[1:])
    step = max(1, block_entries // per_row)
    return [(r, min(r + step, shape[0])) for r in range(0, shape[0], step)]


def read_full(ckpt: Checkpoint, name: str, rows: int | None) -> torch.Tensor:
    """A whole tensor (its first `rows` rows), read without keeping the file mapped."""
    if rows is None:
        return ckpt.get_rows(name, 0, 0)
    return ckpt.get_rows(name, 0, rows)


def read_inputs(alignment, name: str, with_deltas: bool = True,
                rows: tuple[int, int] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """θ0 (float32) and the task vectors τ_i = θ_i − θ0 (float32) of one merged tensor, or of
    its rows [r0, r1) (the base's rows only: a source's added vocabulary rows are not merged)."""
    info = alignment.base.info(name)

    def read(ckpt: Checkpoint, key: str) -> torch.Tensor:
        if rows is not None:
            return ckpt.get_rows(key, *rows)
        return read_full(ckpt, key, info.shape[0] if info.shape else None)

    base = read(alignment.base, name).to(torch.float32)
    deltas: list[torch.Tensor] = []
    if with_deltas:
        for key, ckpt in alignment.sources.items():
            theta = read(ckpt, alignment.source_name(key, name))
            if not all_finite(theta):
                raise DotsError(f"source {key} ({ckpt.source}) has NaN/Inf values in {name}")
            tau = theta if theta.dtype == torch.float32 else theta.to(torch.float32)
            del theta
            deltas.append(tau.sub_(base))
    return base, deltas


def tensor_stream(alignment, names: Sequence[str], with_deltas: bool = True,
                  block_entries: int = BLOCK_ENTRIES) -> Iterator[tuple[str, torch.Tensor, list[torch.Tensor]]]:
    """(name, θ0, [τ_i]) per merged tensor, a large tensor as consecutive row blocks."""
    for name in names:
        for span in row_blocks(alignment.base.info(name).shape, block_entries):
            yield (name, *read_inputs(alignment, name, with_deltas, span))


def block_stream(alignment, name: str, spans: Sequence[tuple[int, int]],
                 with_deltas: bool = True) -> Iterator[tuple[int, torch.Tensor, list[torch.Tensor]]]:
    """A fresh pass over one tensor's row blocks: (flat offset, θ0 rows, [τ_i rows])."""
    per_row = math.prod(alignment.base.info(name).shape[1:])
    for span in spans:
        yield (span[0] * per_row, *read_inputs(alignment, name, with_deltas, span))


# --- options ----------------------------------------------------------------------------

def resolve_weights(weights: Any, keys: Sequence[str]) -> list[float]:
    """Per-source weights from None (all 1), a number (all equal), a list (source order) or a mapping."""
    if weights is None:
        values = [1.0] * len(keys)
    elif isinstance(weights, (int, float)):
        values = [float(weights)] * len(keys)
    elif isinstance(weights, Mapping):
        unknown = sorted(set(map(str, weights)) - set(keys))
        if unknown:
            raise DotsError(f"weights name unknown source(s) {', '.join(unknown)} (sources: {', '.join(keys)})")
        values = [float(weights.get(k, 1.0)) for k in keys]
    else:
        values = [float(w) for w in weights]
        if len(values) != len(keys):
            raise DotsError(f"{len(values)} weights for {len(keys)} sources")
    if not all(math.isfinite(v) for v in values):
        raise DotsError(f"weights must be finite numbers, got {values}")
    return values


def _check_output(output: str | os.PathLike, overwrite: bool, inputs: Sequence[Checkpoint]) -> Path:
    out = Path(output).expanduser().resolve()
    if out.exists() and not overwrite:
        raise DotsError(f"output exists: {out} (pass overwrite=true to replace it)")
    for ckpt in inputs:
        if ckpt.path.resolve() == out:
            raise DotsError(f"output {out} is one of the input checkpoints")
    return out


# --- executor ---------------------------------------------------------------------------

def merge_checkpoints(
    base: str | os.PathLike,
    sources: Mapping[str, str | os.PathLike],
    output: str | os.PathLike,
    method: str = "ties",
    options: Mapping[str, Any] | None = None,
    weights: Any = None,
    overwrite: bool = False,
    revision: str | None = None,
    config_from: str = "base",
    cache_dir: str | os.PathLike | None = None,
    pool: Mapping | None = None,
    format_prompt: Callable[[str], str] | None = None,
    device: str = "cpu",
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    card_config: Mapping[str, Any] | None = None,
    block_entries: int = BLOCK_ENTRIES,
) -> Path:
    """Merge `sources` into `base` with `method` and write a loadable model to `output`.
    Tensors above `block_entries` entries are read, merged (blockwise methods) and written
    in row blocks, so peak memory does not grow with the model's width."""
    from dots.align import align, config_differences
    from dots.modelcard import render_model_card

    spec = get_method(method)
    opts = build_options(spec, dict(options or {}))
    if weights is not None and not spec.weighted:
        raise DotsError(f"method {spec.name} takes no per-model weights")
    if not sources:
        raise DotsError("no source checkpoints given (add +backbone.sources.KEY=PATH)")
    n = len(sources)
    if n < spec.min_sources or (spec.max_sources is not None and n > spec.max_sources):
        want = (f"exactly {spec.min_sources}" if spec.max_sources == spec.min_sources
                else f"at least {spec.min_sources}" if spec.max_sources is None
                else f"{spec.min_sources} to {spec.max_sources}")
        raise DotsError(f"method {spec.name} needs {want} sources, got {n} ({', '.join(sources)})")
    if not isinstance(block_entries, int) or block_entries < 1:
        raise DotsError(f"block_entries must be a positive integer, got {block_entries!r}")
    if Path(output).expanduser().exists() and not overwrite:  # before opening anything large
        raise DotsError(f"output exists: {Path(output).expanduser().resolve()} (pass overwrite=true to replace it)")

    base_ckpt = Checkpoint(base, revision)
    source_ckpts = {str(k): Checkpoint(v, revision) for k, v in sources.items()}
    out = _check_output(output, overwrite, [base_ckpt, *source_ckpts.values()])
    al = align(base_ckpt, source_ckpts)
    for field_name, values in config_differences(base_ckpt, source_ckpts).items():
        log.warning("config field %s differs: %s", field_name, values)
    keys = list(source_ckpts)
    weight_list = resolve_weights(weights, keys) if spec.weighted else [1.0] * n
    output_config = al.output_config(config_from)
    context = MergeContext(al, Path(cache_dir) if cache_dir else None, pool, format_prompt, device)

    stats = None
    if spec.first_pass is not None:
        stats = spec.first_pass(lambda: tensor_stream(al, al.merged, block_entries=block_entries), opts, context)

    card = render_model_card(
        method=spec.name, options={f: getattr(opts, f) for f in opts.__dataclass_fields__},
        base=str(base), sources={k: str(v) for k, v in sources.items()},
        weights=dict(zip(keys, weight_list)) if spec.weighted else None, config=card_config,
    )
    merged = set(al.merged)
    # tokenizer / generation files: config_from's, unless a source added vocabulary rows
    copy_from = al.tokenizer_source() if al.extra_rows else (base_ckpt if config_from == "base" else source_ckpts[config_from])
    with CheckpointWriter(out, al.out_plan, max_shard_bytes=max_shard_bytes, overwrite=overwrite) as writer:
        for name in progress_bar(list(al.out_plan), f"merge ({spec.name})"):
            if name in merged:
                _merge_one(al, name, spec, opts, weight_list, stats, writer, block_entries)
            else:
                for r0, r1 in row_blocks(base_ckpt.info(name).shape, block_entries):
                    rows = base_ckpt.get_rows(name, r0, r1)
                    if rows.dim():
                        writer.write_rows(name, r0, rows)
                    else:
                        writer.write(name, rows)
                    del rows
        writer.add_file("config.json", json.dumps(output_config, indent=2) + "\n")
        writer.add_file("README.md", card)
        result = writer.commit(copy_from=copy_from)
    log.info("wrote %s (%d merged, %d copied tensors)", result, len(al.merged), len(al.copied))
    return result


def _merge_one(al, name: str, spec, opts, weights: Sequence[float], stats, writer: CheckpointWriter,
               block_entries: int) -> None:
    """Merge one tensor and hand it to the writer: whole, or (a blockwise method on a large
    tensor) in row blocks after the method's tensor_pass over the same blocks."""
    info = al.base.info(name)
    spans = row_blocks(info.shape, block_entries) if spec.blockwise else [(0, info.shape[0] if info.shape else 0)]
    if len(spans) == 1:
        base, deltas = read_inputs(al, name, spec.reads_deltas)
        merged = _apply(spec, name, base, deltas, weights, opts, stats, WHOLE)
        extra = al.extra_rows_tensor(name)
        if extra is not None:
            merged = torch.cat([merged.to(extra.dtype), extra])
        writer.write(name, merged)
        return
    facts = None
    if spec.tensor_pass is not None:
        facts = spec.tensor_pass(name, info.numel, lambda: block_stream(al, name, spans), opts, stats)
    for start, base, deltas in block_stream(al, name, spans):
        rows = start // max(1, math.prod(info.shape[1:]))
        writer.write_rows(name, rows, _apply(spec, name, base, deltas, weights, opts, stats,
                                             Part(start, info.numel, facts)))
        del base, deltas
    extra = al.extra_rows_tensor(name)
    if extra is not None:
        writer.write_rows(name, info.shape[0], extra)


def _apply(spec, name: str, base: torch.Tensor, deltas: list[torch.Tensor], weights: Sequence[float], opts, stats,
           part: Part) -> torch.Tensor:
    """θ0 + the method's delta (or its θ, for `absolute` methods) for one tensor or block."""
    delta = spec.merge(name, base, deltas, weights, opts, stats, part)
    del deltas
    if tuple(delta.shape) != tuple(base.shape):
        raise RuntimeError(f"method {spec.name} returned shape {tuple(delta.shape)} for {name}, expected {tuple(base.shape)}")
    return delta if spec.absolute else base.add_(delta)


# --- CLI --------------------------------------------------------------------------------

def _prompt_formatter(template: str | None, tokenizer_path: str) -> Callable[[str], str] | None:
    """question → prompt text under the backbone's SPEC §8 template (for SAR's calibration)."""
    if not template or template == "plain":
        return None
    from dots.prompts import format_prompt

    tokenizer = None
    if template == "chat":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda question: format_prompt(question, template, tokenizer)


SOURCE_OVERRIDE = re.compile(r"^(\+{0,2})backbone\.sources\.([^=]+)=")


def command_line_sources(overrides: Sequence[str]) -> list[str]:
    """Source keys given as `[+|++]backbone.sources.KEY=PATH` on the command line."""
    return [m.group(2) for m in map(SOURCE_OVERRIDE.match, overrides) if m]


def _resolved(cfg, keep_sources: Sequence[str]) -> dict:
    """The config as plain data; sources given on the command line replace the backbone's
    own (dropped before resolving, so e.g. the lab's `${lab:sft}` is never built)."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    if OmegaConf.is_missing(cfg, "output"):
        raise DotsError("no output directory given (add output=DIR)")
    if keep_sources and "backbone" in cfg and cfg.backbone.get("sources") is not None:
        with open_dict(cfg):
            for key in list(cfg.backbone.sources):
                if key not in keep_sources:
                    del cfg.backbone.sources[key]
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DotsError):
            raise cause from None
        raise DotsError(f"bad configuration: {str(exc).splitlines()[0]}") from None


def run_from_config(cfg, keep_sources: Sequence[str] = ()) -> Path:
    """Run one merge from a composed Hydra config (conf/merge.yaml)."""
    container = _resolved(cfg, keep_sources)
    backbone = container.get("backbone") or {}
    method_cfg = dict(container.get("method") or {})
    name = method_cfg.pop("name", None)
    if not name:
        raise DotsError("the method config has no name (pick one with method=NAME)")
    weights = method_cfg.pop("weights", None)
    if not container.get("output"):
        raise DotsError("no output directory given (add output=DIR)")
    if not backbone.get("base"):
        raise DotsError("no base model given (add backbone.base=DIR_OR_ID)")
    revision = backbone.get("revision")
    return merge_checkpoints(
        base=backbone["base"], sources=backbone.get("sources") or {}, output=container["output"],
        method=name, options=method_cfg, weights=weights, overwrite=bool(container.get("overwrite", False)),
        revision=revision if isinstance(revision, str) else None,
        config_from=str(backbone.get("config_from") or "base"),
        cache_dir=container.get("cache_dir"), pool=container.get("pool"),
        format_prompt=_prompt_formatter(backbone.get("prompt"), str(backbone["base"])) if name == "sar" else None,
        device=_device(container.get("device", "auto")),
        max_shard_bytes=int(container.get("max_shard_bytes") or DEFAULT_MAX_SHARD_BYTES),
        block_entries=_positive_int(container.get("block_entries", BLOCK_ENTRIES), "block_entries"),
        card_config=container,
    )


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DotsError(f"{what} must be a positive integer, got {value!r}") from None
    if number < 1 or number != value and not isinstance(value, str):
        raise DotsError(f"{what} must be a positive integer, got {value!r}")
    return number


def _device(device: str | None) -> str:
    from dots.fisher import resolve_device

    return resolve_device(device)


def _check_method_choice(argv: Sequence[str]) -> None:
    """`method=NAME` with no conf/method/NAME.yaml: one line instead of Hydra's report."""
    for arg in argv:
        if arg.startswith("method="):
            choice = arg.split("=", 1)[1]
            if not (CONF_DIR / "method" / f"{choice}.yaml").exists():
                known = sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))
                raise DotsError(f"unknown merge method {choice!r} (known: {', '.join(known)})")


def main() -> None:
    """Entry of `python -m dots.merge` (Hydra). `+backbone.sources.KEY=` may name a key the
    backbone already has (it is rewritten to Hydra's add-or-override `++`)."""
    import hydra

    import dots.lab  # noqa: F401  registers the ${lab:...} resolver of the default backbone
    from dots.memory import reuse_freed_memory

    reuse_freed_memory()

    argv = [("+" + a) if re.match(r"^\+backbone\.sources\.", a) else a for a in sys.argv[1:]]
    sys.argv[1:] = argv
    keep = command_line_sources(argv)

    @hydra.main(config_path="../conf", config_name="merge", version_base="1.3")
    def _main(cfg) -> None:
        path = cli_errors(run_from_config)(cfg, keep)
        print(path)

    cli_errors(_check_method_choice)(argv)
    _main()


if __name__ == "__main__":
    main()
