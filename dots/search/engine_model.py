"""The model the search's engine runs, and the sources swapped into it for the selection.

The engine runs models of the output's shapes: the base, or, when a source adds
vocabulary rows, θ(0) with those rows, written once to `engine-init/` with the output's
config and tokenizer, so that every swap fits.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from dots.errors import DotsError
from dots.io.align import Alignment
from dots.options.search import BackboneOptions
from dots.search.stages import Stage, run_stage
from dots.vectors.cache import TaskVectors

if TYPE_CHECKING:
    from dots.engines.base import Engine

__all__ = ["engine_model", "swap_original"]

log = logging.getLogger("dots.search")


ENGINE_MODEL = "engine-init"


def engine_model(backbone: BackboneOptions, alignment: Alignment, tv: TaskVectors, run_dir: Path) -> Path:
    """The model directory the search's engine starts on: the base, unless a source adds
    vocabulary rows. Then θ(λ) has more embedding / lm_head rows than the base, so the engine
    starts on θ(0) — the base plus the added rows, with the output's config (config_from,
    vocab_size adjusted) and tokenizer, as `dots.export` writes it — in <run_dir>/engine-init,
    a stage of the run: written once and reused while its inputs are unchanged."""
    if not alignment.extra_rows:
        return alignment.base.path
    from dots.export.model import write_synthesized

    out = run_dir / ENGINE_MODEL
    config_from = backbone.config_from
    added_by = ", ".join(sorted(set(alignment.extra_rows.values())))

    def key(_: Any) -> dict:
        aux = alignment.tokenizer_source()
        return {
            "base": alignment.base.fingerprint(),
            "sources": {k: v.fingerprint() for k, v in alignment.sources.items()},
            "extra_rows": alignment.extra_rows,
            "config_from": config_from,
            "tokenizer": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in aux.aux_files()],
        }

    def build(_: Any) -> Path:
        card = (
            f"# θ(0) of {backbone.name}\n\nThe base with the vocabulary rows that source "
            f"{added_by} added: the model the search's engine starts on (the output's shapes, "
            "config and tokenizer). Not a result.\n"
        )
        write_synthesized(
            out,
            tv,
            alignment,
            {k: 0.0 for k in tv.sources},
            alignment.output_config(config_from),
            card,
            device="cpu",
            kind="engine-init",
            run_dir=run_dir,
        )
        log.info("engine model: wrote %s (the base + %s's added vocabulary rows)", out, added_by)
        return out

    return run_stage(run_dir, Stage("engine_model", ENGINE_MODEL, key, build, load=lambda _: out), None)


def padded_source(alignment: Alignment, tv: TaskVectors, key: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Source `key`'s tensors in the base's naming, each embedding / lm_head with fewer rows
    than the output completed with the output's added rows (those every θ(λ) carries)."""
    ckpt = alignment.sources[key]
    for name in alignment.base.names:
        tensor = ckpt.get(alignment.source_name(key, name))
        if name in alignment.extra_rows and tensor.shape[0] < alignment.out_plan[name].shape[0]:
            extra = tv.extra_rows(name)
            if extra is None:
                raise DotsError(f"the task-vector cache lacks the added rows of {name}: stale cache?")
            have = tensor.shape[0] - alignment.base.info(name).shape[0]
            dtype = torch.promote_types(tensor.dtype, extra.dtype)
            tensor = torch.cat([tensor.to(dtype), extra[have:].to(dtype)])
        yield name, tensor


def swap_original(engine: Engine, alignment: Alignment, tv: TaskVectors, key: str) -> None:
    """Swap source `key` itself into the engine (selection.source=original). With added
    vocabulary the engine has the output's shapes: a source with as many rows is swapped
    as saved; one with fewer (a source that added no tokens) gets the output's added rows,
    i.e. it is scored with the output's vocabulary. The engine's own swap_checkpoint stays
    strict and rejects a checkpoint of other shapes (DotsError); the base is never swapped."""
    ckpt = alignment.sources[key]
    if all(
        alignment.source_name(key, n) in ckpt
        and ckpt.info(alignment.source_name(key, n)).shape == alignment.out_plan[n].shape
        for n in alignment.extra_rows
    ):
        engine.swap_checkpoint(ckpt.path)
    else:
        engine.swap_weights(padded_source(alignment, tv, key))


def source_activation(
    engine: Engine, source: str, alignment: Alignment, tv: TaskVectors
) -> dict[str, Callable[[], None]]:
    """Per source, a function that puts it into the engine for the selection:
    the checkpoint itself (`source: original`) or θ0 + τ̃_i (`sparsified`)."""
    if source == "original":
        return {s: partial(swap_original, engine, alignment, tv, s) for s in alignment.sources}
    names = list(tv.sources)

    def one_hot(s: str) -> Callable[[], None]:
        return lambda: engine.swap_coefficients({t: float(t == s) for t in names})

    return {s: one_hot(s) for s in alignment.sources}
