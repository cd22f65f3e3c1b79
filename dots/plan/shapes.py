"""The model shapes a plan is made for (`model_shapes`): a config.json, a local checkpoint, or a
Hub config."""

from __future__ import annotations

from dots.errors import DotsError
from dots.options.search import PlanOptions

__all__ = ["model_shapes"]


def model_shapes(options: PlanOptions, shapes: str | None):
    """The ModelShapes the plan uses: `--shapes`, a local base (+ sources), or a Hub config."""
    from pathlib import Path

    from dots.io.shapes import ModelShapes

    if shapes:
        return ModelShapes.from_config_file(shapes)
    base = options.base
    if Path(base).expanduser().is_dir():
        from dots.io.align import align
        from dots.io.checkpoint import Checkpoint
        from dots.io.inputs import check_checkpoint

        sources = {k: check_checkpoint(Checkpoint(str(v))) for k, v in options.sources.items()}
        return ModelShapes.from_alignment(align(check_checkpoint(Checkpoint(base)), sources))
    from huggingface_hub import hf_hub_download

    try:
        config = hf_hub_download(base, "config.json", revision=options.revision)
    except Exception as exc:  # offline, unknown repo, ...
        raise DotsError(f"cannot read {base}'s config.json ({str(exc).splitlines()[0]}); give --shapes") from None
    return ModelShapes.from_config_file(config)
