r"""`python -m dots.plan`: the memory plan of a search, printed without running it.

    python -m dots.plan [--shapes CONFIG_JSON] [--device cuda|cpu] [--device-memory-gb GB] \
        [search overrides: backbone=qwen7b engine=vllm engine.tensor_parallel_size=8 ...]

The search's config (dots/conf/search.yaml + the overrides) is composed in memory and
`dots.plan.search.plan_search` computes what `python -m dots.search` with the same
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
import math
import sys
from typing import Sequence

from dots.checks import number_in
from dots.errors import argument_error, cli_errors
from dots.plan.shapes import model_shapes


@cli_errors
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dots.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="a config.json (or a directory holding one) giving the model's shapes")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="where the engine runs (default: as detected)")
    parser.add_argument("--device-memory-gb", help="memory of each device in GB (default: measured)")
    parser.error = argument_error  # type: ignore[method-assign]
    args, overrides = parser.parse_known_args(argv)
    from dots.options.compose import compose
    from dots.options.search import plan_options
    from dots.plan.render import describe
    from dots.plan.search import plan_search
    from dots.runtime.devices import DeviceMemory

    options = plan_options(compose("search", overrides))
    memory = None
    device = args.device
    if args.device_memory_gb is not None:
        size = int(number_in(args.device_memory_gb, "--device-memory-gb", 0, math.inf, low_open=True) * 1e9)
        memory, device = DeviceMemory(size, size, "given"), device or "cuda"
    plan = plan_search(options, model_shapes(options, args.shapes), memory=memory, device=device)
    print("\n".join(describe(plan)))


if __name__ == "__main__":
    main(sys.argv[1:])
