"""Streaming merge executor and the `python -m dots.merge` CLI (docs/method.md §5).

For each tensor name (in the base's order) it reads the base and every source, forms
τ_i = θ_i − θ0 in float32, calls the method, writes θ0 + δ cast to the base dtype at
its planned offset (`CheckpointWriter`) and frees everything before the next name.
A tensor above `block_entries` (2^24) entries — the embedding, a 7B MLP — is read,
merged and written in row blocks (every method is blockwise; TIES, RAM-per-tensor and
SAR first gather their per-tensor facts in a pass over the blocks), with the same bits
as a whole-tensor merge. So the resident set is about
(K + 4) float32 blocks plus the largest tensor below the block size and a fixed
overhead, whatever the model's size or width. Methods with whole-model statistics get
a first pass over the same (blocked) stream before the writing pass.
The command line is in `dots.merge.__main__`.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from dots.checks import finite_number
from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.destination import claim, input_paths
from dots.io.inputs import check_checkpoint, check_distinct_destinations, check_sources_differ, taskvec_dir
from dots.io.writer import CheckpointWriter
from dots.keys import stable_hash
from dots.merge.methods import Method, build_options, get_method
from dots.merge.methods.base import WHOLE, Part
from dots.options.merge import Calibration
from dots.paths import check_creatable
from dots.runtime.progress import progress_bar
from dots.vectors.deltas import BLOCK_ENTRIES, block_stream, read_inputs, row_blocks, tensor_stream

__all__ = ["merge_checkpoints"]

log = logging.getLogger(__name__)

DEFAULT_MAX_SHARD_BYTES = 5 * 2**30


def resolve_weights(weights: Any, keys: Sequence[str]) -> list[float]:
    """Per-source weights from None (all 1), a number (all equal), a list (source order) or a mapping."""
    if weights is None:
        values = [1.0] * len(keys)
    elif isinstance(weights, Mapping):
        unknown = sorted(set(map(str, weights)) - set(keys))
        if unknown:
            raise DotsError(f"weights name unknown source(s) {', '.join(unknown)} (sources: {', '.join(keys)})")
        values = [finite_number(weights.get(k, 1.0), f"method.weights.{k}") for k in keys]
    elif isinstance(weights, (list, tuple)):
        values = [finite_number(w, "method.weights") for w in weights]
        if len(values) != len(keys):
            raise DotsError(f"method.weights has {len(values)} values for {len(keys)} sources ({', '.join(keys)})")
    else:
        values = [finite_number(weights, "method.weights")] * len(keys)
    return values


# --- executor --------------------------------------------------------------------------


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
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    config: Mapping[str, Any] | None = None,
    block_entries: int = BLOCK_ENTRIES,
    calibration: Calibration | None = None,
) -> Path:
    """Merge `sources` into `base` with `method` and write a loadable model to `output`.
    Tensors above `block_entries` entries are read, merged (blockwise methods) and written
    in row blocks, so peak memory does not grow with the model's width. `config`: the run's
    composed configuration, recorded in the model card. `calibration`: offered to the method's
    first pass (SAR's Fisher queries; None: the built-in arithmetic set, unprompted, on the CPU)."""
    from dots.export.card import render_model_card
    from dots.io.align import align, config_differences

    spec = get_method(method)
    opts = build_options(spec, dict(options or {}))
    if weights is not None and not spec.weighted:
        raise DotsError(f"method {spec.name} takes no per-model weights")
    if not sources:
        raise DotsError("no source checkpoints given (add +backbone.sources.KEY=PATH)")
    n = len(sources)
    if n < spec.min_sources or (spec.max_sources is not None and n > spec.max_sources):
        want = (
            f"exactly {spec.min_sources}"
            if spec.max_sources == spec.min_sources
            else f"at least {spec.min_sources}"
            if spec.max_sources is None
            else f"{spec.min_sources} to {spec.max_sources}"
        )
        raise DotsError(f"method {spec.name} needs {want} sources, got {n} ({', '.join(sources)})")
    if not isinstance(block_entries, int) or block_entries < 1:
        raise DotsError(f"block_entries must be a positive integer, got {block_entries!r}")
    # dots deletes only what it wrote: checked before opening anything large (a Hub id downloads)
    local = [p for p in (base, *sources.values()) if Path(p).expanduser().exists()]
    claim(output, "merge", True, local)  # (whether it may be replaced: below, once the inputs are known)
    check_distinct_destinations({"output": (output, "whole"), "cache_dir": (cache_dir, "cache")})
    # the writer makes a sibling of the output and renames it into place: its parent must take it
    check_creatable(Path(output).expanduser().absolute().parent, "output's parent directory")

    base_ckpt = Checkpoint(base, revision)
    source_ckpts = {str(k): Checkpoint(v, revision) for k, v in sources.items()}
    inputs = input_paths([base_ckpt, *source_ckpts.values()])
    identity = stable_hash(  # a rerun of this very merge (after a crash, say) replaces its own output
        {
            "method": spec.name,
            "options": repr(opts),
            "weights": repr(weights),
            "config_from": config_from,
            "inputs": [c.fingerprint() for c in (base_ckpt, *source_ckpts.values())],
            "shard": max_shard_bytes,
            "keys": list(source_ckpts),
            "calibration": repr(calibration),
        },
        16,
    )
    out = claim(output, "merge", overwrite, inputs, identity=identity)
    if cache_dir:
        taskvec_dir(cache_dir, inputs)  # the same cache root as the search's: new, empty or dots' caches
    for ckpt in (base_ckpt, *source_ckpts.values()):
        check_checkpoint(ckpt)  # config.json against the weights, the tokenizer (copied) against config.json
    al = align(base_ckpt, source_ckpts)
    check_sources_differ(al)
    for field_name, values in config_differences(base_ckpt, source_ckpts).items():
        log.warning("config field %s differs: %s", field_name, values)
    keys = list(source_ckpts)
    weight_list = resolve_weights(weights, keys) if spec.weighted else [1.0] * n
    output_config = al.output_config(config_from)

    stats = None
    if spec.first_pass is not None:
        stats = spec.first_pass(
            {
                "stream": lambda: tensor_stream(al, al.merged, block_entries=block_entries),
                "options": opts,
                "alignment": al,
                "cache_dir": Path(cache_dir) if cache_dir else None,
                "calibration": calibration or Calibration(pool=None, prompt=None, tokenizer=str(base), device="cpu"),
            }
        )

    card = render_model_card(
        method=spec.name,
        options={f: getattr(opts, f) for f in opts.__dataclass_fields__},
        base=str(base),
        sources={k: str(v) for k, v in sources.items()},
        weights=dict(zip(keys, weight_list)) if spec.weighted else None,
        revisions=al.revisions(),
        config=config,
        base_dir=base_ckpt.path,
    )
    merged = set(al.merged)
    # tokenizer / generation files: config_from's, unless a source added vocabulary rows
    copy_from = (
        al.tokenizer_source() if al.extra_rows else (base_ckpt if config_from == "base" else source_ckpts[config_from])
    )
    with CheckpointWriter(out, al.out_plan, max_shard_bytes=max_shard_bytes) as writer:
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


def _merge_one(
    al, name: str, spec: Method, opts, weights: Sequence[float], stats, writer: CheckpointWriter, block_entries: int
) -> None:
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
        blocks = lambda: block_stream(al, name, spans)  # noqa: E731
        facts = spec.tensor_pass({"name": name, "total": info.numel, "blocks": blocks, "options": opts, "stats": stats})
    for start, base, deltas in block_stream(al, name, spans, spec.reads_deltas):
        rows = start // max(1, math.prod(info.shape[1:]))
        writer.write_rows(
            name, rows, _apply(spec, name, base, deltas, weights, opts, stats, Part(start, info.numel, facts))
        )
        del base, deltas
    extra = al.extra_rows_tensor(name)
    if extra is not None:
        writer.write_rows(name, info.shape[0], extra)


def _apply(
    spec: Method,
    name: str,
    base: torch.Tensor,
    deltas: list[torch.Tensor],
    weights: Sequence[float],
    opts,
    stats,
    part: Part,
) -> torch.Tensor:
    """θ0 + the method's delta (or its θ, for `absolute` methods) for one tensor or block; the
    method is handed the inputs it declares."""
    inputs = {
        "name": name,
        "base": base,
        "deltas": deltas,
        "weights": weights,
        "options": opts,
        "stats": stats,
        "part": part,
    }
    delta = spec.merge(inputs)
    del deltas, inputs
    if tuple(delta.shape) != tuple(base.shape):
        raise RuntimeError(
            f"method {spec.name} returned shape {tuple(delta.shape)} for {name}, expected {tuple(base.shape)}"
        )
    return delta if spec.absolute else base.add_(delta)
