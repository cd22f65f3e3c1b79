"""The swap canary: before the first trial (and after every restart of the engine), prove that a
weight swap reaches the forward pass.

If a swap ever stopped reaching the model the engine computes with, every trial would score
the same model, the study would still end and its pick would be arbitrary. So on every engine
start, on 3 fixed prompts (their prompt NLL, Σ −log p):

1. a swap to λ = 0 gives the NLL of the freshly loaded θ0;
2. a swap to λ = 0.5 (every source) changes it;
3. that λ written through the engine's public loading path (vLLM: the workers' own
   `reload_weights`; transformers: `load_state_dict`) gives the NLL of the fast path.

Equal means bit for bit on CPU (tolerance 0: the same weights, bits and batch give the same
float sums) and within `CUDA_TOLERANCE` nats per token on a GPU. On a mismatch the run says why
in one line, switches the engine to its public path and checks again; if that fails too it
stops. The verdict, the path and the seconds it cost go into `<run_dir>/canary.yaml`,
`result.yaml` (`swap_canary`) and the model card.

`DOTS_BREAK_SWAP` (tests only) breaks the fast swap on purpose: `copy-params` writes into a
copy of the parameters, `skip-repack` (vLLM) skips the post-load processing after the write.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from dots.engines.base import Engine
from dots.errors import DotsError
from dots.io.commit import write_atomic

__all__ = [
    "CPU_TOLERANCE",
    "CUDA_TOLERANCE",
    "PROMPTS",
    "Canary",
    "broken_swap",
    "checked",
    "nll_gap",
    "read_canary",
    "run_canary",
    "summary",
    "tolerance_for",
]

log = logging.getLogger(__name__)

PROMPTS = (
    "12+34=46. 71-25=46.",
    "Q: What is 7*8? A: The answer is \\boxed{56}.",
    "The quick brown fox jumps over the lazy dog.",
)
LAMBDA = 0.5  # the non-zero λ of every source in checks 2 and 3
CPU_TOLERANCE = 0.0
# nats per token. A GPU engine may reduce in another order from one call to the next (split-K
# GEMMs, atomics; vLLM does not promise batch invariance), which moves bf16 log-probs by ~1e-4
# per token; a swap that does not reach the model moves them by orders of magnitude more (the
# lab: ~0.1-1 per token at λ = 0.5). The canary passed at this tolerance on one H200 (#38).
# The fused swap (`dots.vectors.fused`) needs no allowance of its own: it writes the streaming
# path's bytes, checked at every engine start (a pass that differs is turned off).
CUDA_TOLERANCE = 1e-3
BREAKS = ("copy-params", "skip-repack")
FILE = "canary.yaml"


def broken_swap() -> str | None:
    """The deliberate break tests ask for (`DOTS_BREAK_SWAP`), or None (always, outside tests)."""
    value = os.environ.get("DOTS_BREAK_SWAP") or None
    if value is not None and value not in BREAKS:
        raise DotsError(f"DOTS_BREAK_SWAP must be one of {BREAKS}, got {value!r}")
    return value


@dataclass
class Canary:
    """One canary's verdict: "passed" (fast path), "fell back" (public path) or "failed"."""

    verdict: str
    path: str
    seconds: float
    tolerance: float
    engine: str
    failures: list[str] = field(default_factory=list)
    nll_fresh: list[float] = field(default_factory=list)

    def line(self) -> str:
        why = f": {self.failures[0]}" if self.failures else ""
        return f"swap canary: {self.verdict}, path {self.path}, {self.seconds:.1f} s{why}"


def tolerance_for(engine: Engine) -> float:
    """0 on CPU, `CUDA_TOLERANCE` on an accelerator."""
    device = getattr(engine, "device", None)
    if device is not None:
        on_cpu = str(device).startswith("cpu")
    else:  # vLLM: where its platform runs
        from dots.engines.vllm.compat import on_cpu_platform

        on_cpu = on_cpu_platform()
    return CPU_TOLERANCE if on_cpu else CUDA_TOLERANCE


def _nll(engine: Engine) -> list[tuple[float, int]]:
    return [(r.nll, r.tokens) for r in engine.prompt_nll(list(PROMPTS))]


def nll_gap(a: list[tuple[float, int]], b: list[tuple[float, int]]) -> float:
    """The largest |ΔNLL| per token over the prompts (inf when the token counts differ)."""
    gaps = [abs(x - y) / max(n, 1) if n == m else float("inf") for (x, n), (y, m) in zip(a, b)]
    return max(gaps, default=0.0)


def check_swaps(engine: Engine, sources: list[str], fresh: list[tuple[float, int]], tol: float) -> list[str]:
    """Checks 1-3 on the engine's current swap path; the failures, one line each (none: passed).
    Leaves θ0 in the engine."""
    zero = dict.fromkeys(sources, 0.0)
    moved = dict.fromkeys(sources, LAMBDA)
    failures = []
    engine.swap_coefficients(zero)
    gap = nll_gap(_nll(engine), fresh)
    if gap > tol:
        failures.append(f"λ=0 differs from the freshly loaded θ0 by {gap:.3g} nats/token")
    engine.swap_coefficients(moved)
    fast = _nll(engine)
    if nll_gap(fast, fresh) <= tol:
        failures.append(f"λ={LAMBDA} leaves the log-probs of θ0 unchanged: the swap does not reach the model")
    engine.swap_coefficients_public(moved)
    gap = nll_gap(_nll(engine), fast)
    if gap > tol:
        failures.append(f"λ={LAMBDA} through the public loading path differs from the fast one by {gap:.3g} nats/token")
    engine.swap_coefficients(zero)
    return failures


def run_canary(engine: Engine, sources: list[str], run_dir: Path | None = None) -> Canary:
    """The canary on a freshly started engine (θ0 loaded, no swap yet); written to
    `<run_dir>/canary.yaml`. Raises a one-line DotsError when the public path fails too."""
    start = time.perf_counter()
    tol = tolerance_for(engine)
    fresh = _nll(engine)
    path = engine.swap_path
    failures = check_swaps(engine, sources, fresh, tol)
    verdict = "passed"
    if failures and path != "public":
        print(f"swap canary: the fast swap failed ({failures[0]}); switching to the public loading path")
        engine.use_public_path()
        path = "public"
        again = check_swaps(engine, sources, fresh, tol)
        verdict = "failed" if again else "fell back"
        failures += again
    elif failures:
        verdict = "failed"
    canary = Canary(
        verdict,
        path,
        round(time.perf_counter() - start, 3),
        tol,
        type(engine).__name__,
        failures,
        [x for x, _ in fresh],
    )
    if run_dir is not None:
        write_atomic(Path(run_dir) / FILE, yaml.safe_dump(asdict(canary), sort_keys=False, allow_unicode=True))
    print(canary.line())
    if verdict == "failed":
        raise DotsError(f"{canary.line()}; weight swaps do not reach the model on this engine: see dots.doctor")
    return canary


def checked(engine: Engine, sources: list[str], run_dir: Path | None) -> Engine:
    """`engine`, just started, once its canary holds (closed when it fails)."""
    try:
        run_canary(engine, sources, run_dir)
    except BaseException:
        engine.close()
        raise
    return engine


def read_canary(run_dir: Path) -> Mapping[str, Any] | None:
    """The last canary of a run (`canary.yaml`), or None."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text())


def summary(canary: Mapping[str, Any] | None) -> str | None:
    """One cell for result.yaml and the model card: "passed (fast path, 2.9 s)"."""
    if not canary:
        return None
    return f"{canary['verdict']} ({canary['path']} path, {float(canary['seconds']):.1f} s)"
