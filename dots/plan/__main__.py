r"""`python -m dots.plan`: the memory plan of a search, printed without running it.

    python -m dots.plan [--shapes CONFIG_JSON] [--device cuda|cpu] [--device-memory-gb GB] \
        [search overrides: backbone=qwen7b engine=vllm engine.tensor_parallel_size=8 ...]

The search's config (dots/conf/search.yaml + the overrides) is composed in memory and
`dots.engines.setting.plan_search` computes what `python -m dots.search` with the same
overrides would hold on each device — engine weights, its KV cache, θ0 and τ̃ resident or
read from the cache — and which `synth_cache` it would use. The model's tensors come from
`--shapes` (a config.json: nothing is downloaded), else from the backbone's base: exact
from a local checkpoint's headers, or from its config.json alone for a Hub id (one small
file, never the weights). The devices are measured where this runs, unless
`--device-memory-gb` states each device's memory (then `--device`, default cuda, says what
they are). A plan that cannot fit prints its one error line and exits with code 2, as
the search would before writing anything.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from dots.errors import DotsError, cli_errors


def model_shapes(cfg: Any, shapes: str | None):
    """The ModelShapes the plan uses: `--shapes`, a local base (+ sources), or a Hub config."""
    from pathlib import Path

    from dots.io.shapes import ModelShapes

    if shapes:
        return ModelShapes.from_config_file(shapes)
    base = str(cfg.backbone.base)
    if Path(base).expanduser().is_dir():
        from dots.io.align import align
        from dots.io.checkpoint import Checkpoint

        sources = {str(k): Checkpoint(str(v)) for k, v in cfg.backbone.sources.items()}
        return ModelShapes.from_alignment(align(Checkpoint(base), sources))
    from huggingface_hub import hf_hub_download

    try:
        config = hf_hub_download(base, "config.json", revision=cfg.backbone.get("revision"))
    except Exception as exc:  # offline, unknown repo, ...
        raise DotsError(f"cannot read {base}'s config.json ({str(exc).splitlines()[0]}); give --shapes") from None
    return ModelShapes.from_config_file(config)


@cli_errors
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dots.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="a config.json (or a directory holding one) giving the model's shapes")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="where the engine runs (default: as detected)")
    parser.add_argument("--device-memory-gb", type=float, help="memory of each device in GB (default: measured)")
    args, overrides = parser.parse_known_args(argv)
    from dots.config import compose
    from dots.engines.setting import plan_search
    from dots.plan.devices import DeviceMemory
    from dots.plan.render import describe

    cfg = compose("search", overrides)
    memory = None
    device = args.device
    if args.device_memory_gb is not None:
        size = int(args.device_memory_gb * 1e9)
        memory, device = DeviceMemory(size, size, "given"), device or "cuda"
    plan = plan_search(cfg, model_shapes(cfg, args.shapes), memory=memory, device=device)
    print("\n".join(describe(plan)))


if __name__ == "__main__":
    main(sys.argv[1:])
