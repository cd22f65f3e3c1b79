"""`sar` — SAR-Merging (seed 000, Eq. 12-16) for exactly two models A, B.

With ε = 1e-5 on |δ| (δA, δB = the first and second source in config order):
  conflict C = both changed (|δ| > ε) with opposite signs;
  r = δA + δB outside C (a sum, Eq. 14);
  on C keep the δ of the model with the larger diagonal Fisher S (Eq. 13), ties → B.
Private entries (changed by exactly one model) whose |r| is below the per-tensor
median |r| of the private entries (`torch.median`: the lower middle value) are dropped
with probability p = 0.2 and the survivors among them rescaled by 1/(1−p) (Eq. 15;
the paper drops "the lower-magnitude half of the private region"); everything else
passes unchanged. θ = θ0 + λ·r with λ (`scale`) default 1.0 (the paper gives none).

Drop masks: `dots.merge.methods.base.drop_mask(shape, p, name, seed)` (blocks of
`torch.rand < p` seeded by tensor name, seed and block), so results do not depend on
the order tensors are processed in.

Fisher: computed by `dots.merge.fisher` once per source over `calibration_size` (64) queries
and cached next to the task-vector cache. Memory: the Fisher pass holds 2 float32 copies
of a model (weights, accumulator; the gradients are folded in one parameter at a time);
the merge pass holds per tensor the base, δA, δB, S_A, S_B and r — about 6 float32 copies
plus boolean masks — of one row block: blockwise, a large tensor is merged in row blocks
after its tensor pass has found the median |r| of its private entries over all of them
(exact, `RadixSelect`), so every block drops the entries the whole tensor would.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from dots.checks import number_in, positive_int
from dots.merge.methods.base import BlockStream, Part, check_choice, check_probability, chunkwise, drop_mask
from dots.merge.methods.declare import merge_method
from dots.options.merge import Calibration

if TYPE_CHECKING:
    from dots.io.align import Alignment
from dots.vectors.topk import RadixSelect, magnitude_bits

__all__ = ["SarStats", "SarOptions", "private_entry_magnitudes"]

log = logging.getLogger(__name__)

FISHER_DTYPES = ("float32", "bfloat16", "float16", "float64")


@dataclass(frozen=True)
class SarOptions:
    epsilon: float = 1e-5
    p: float = 0.2
    scale: float = 1.0
    seed: int = 0
    calibration_size: int = 64
    calibration_seed: int = 0
    max_new_tokens: int = 256  # greedy completion length when a query has no gold answer
    fisher_dtype: str = "float32"

    def __post_init__(self) -> None:
        check_probability(self.p, "method.p")
        positive_int(self.calibration_size, "method.calibration_size")
        positive_int(self.max_new_tokens, "method.max_new_tokens")
        number_in(self.epsilon, "method.epsilon", 0.0, math.inf, high_open=True)
        check_choice(self.fisher_dtype, FISHER_DTYPES, "method.fisher_dtype")


class SarStats:
    """Per-tensor access to the two sources' diagonal Fisher."""

    def __init__(self, tables: Sequence) -> None:
        self.tables = list(tables)

    def fisher(self, name: str, shape: Sequence[int], rows: tuple[int, int] | None = None) -> list[torch.Tensor]:
        return [table.get(name, shape, rows) for table in self.tables]


def prompt_formatter(template: str | None, tokenizer_path: str) -> Callable[[str], str] | None:
    """question → prompt text under the backbone's prompt template (`backbone.prompt`)."""
    if not template or template == "plain":
        return None
    from dots.scoring.prompts import format_prompt

    tokenizer = None
    if template == "chat":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda question: format_prompt(question, template, tokenizer)


def fisher_pass(
    options: SarOptions, alignment: Alignment, cache_dir: Path | None, calibration: Calibration
) -> SarStats:
    """First pass: compute (or reuse) the diagonal Fisher of A and B on the calibration queries
    (`calibration`: the configured pool, prompt template and device)."""
    from dots.merge.calibration import calibration_set
    from dots.merge.fisher import FisherTable, default_fisher_root, fisher_for, resolve_device

    format_prompt = prompt_formatter(calibration.prompt, calibration.tokenizer)
    examples = calibration_set(
        calibration.pool, int(options.calibration_size), int(options.calibration_seed), format_prompt
    )
    root = cache_dir / "fisher" if cache_dir is not None else default_fisher_root()
    dtype = getattr(torch, str(options.fisher_dtype))
    device = resolve_device(calibration.device)
    tables = []
    for key, ckpt in alignment.sources.items():
        path = fisher_for(ckpt, examples, root, device, int(options.max_new_tokens), dtype)
        renames = {name: src for (k, name), src in alignment.renames.items() if k == key}
        tables.append(FisherTable(path, renames))
    return SarStats(tables)


def private_entry_magnitudes(a: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """|r| = |a + b| on the private entries (changed by exactly one model; no conflict is
    private, so the Fisher never decides them)."""
    private = (a.abs() > eps) ^ (b.abs() > eps)
    return torch.add(a[private], b[private]).abs_()


def private_median(blocks: BlockStream, options: SarOptions) -> Any:
    """Tensor pass: the lower median of |r| over the tensor's private entries — `torch.median` of the
    whole-tensor path — from two passes over the row blocks; None when nothing is dropped."""
    eps = float(options.epsilon)
    if float(options.p) <= 0.0:
        return None
    select = RadixSelect([])
    for _start, _base, (a, b) in blocks():
        select.add_high(magnitude_bits(private_entry_magnitudes(a, b, eps)))
    n = select.total
    if n == 0:
        return None
    k = n - (n - 1) // 2  # the lower middle value, as torch.median: the k-th largest
    select.ks = [k]
    for _start, _base, (a, b) in blocks():
        select.add_low(magnitude_bits(private_entry_magnitudes(a, b, eps)))
    return torch.tensor(select.thresholds()[k].value, dtype=torch.float32)


@merge_method(
    "sar",
    SarOptions,
    first_pass=fisher_pass,
    tensor_pass=private_median,
    min_sources=2,
    max_sources=2,
    blockwise=True,
    summary="Fisher-arbitrated conflicts, low private entries dropped (SAR-Merging)",
)
def sar(name: str, deltas: list[torch.Tensor], options: SarOptions, stats: SarStats | None, part: Part) -> torch.Tensor:
    """r = δA + δB off the conflicts C, on C the δ of the larger Fisher (ties → B); private
    entries with |r| < median drop with p, survivors ×1/(1−p); merged = λ·r."""
    eps, p = float(options.epsilon), float(options.p)
    a, b = deltas
    changed_a, changed_b = a.abs() > eps, b.abs() > eps
    conflict = changed_a & changed_b & (((a > 0) & (b < 0)) | ((a < 0) & (b > 0)))
    private = changed_a ^ changed_b
    del changed_a, changed_b
    r = torch.add(a, b)
    rows = None
    if part.total is not None:  # a row block of a larger tensor
        per_row = a[0].numel() if a.dim() > 1 else 1
        rows = (part.start // per_row, part.start // per_row + (a.shape[0] if a.dim() else 1))
    if bool(conflict.any()):
        if stats is None:
            raise ValueError("sar needs the Fisher statistics of its first pass")
        fisher_a, fisher_b = stats.fisher(name, tuple(a.shape), rows)
        a_wins = fisher_a > fisher_b  # ties → B
        del fisher_a, fisher_b
        torch.where(conflict & a_wins, a, r, out=r)
        torch.where(conflict & ~a_wins, b, r, out=r)
        del a_wins
    del conflict
    if p > 0.0 and bool(private.any()):
        magnitude = r.abs()
        median = torch.median(magnitude[private]) if part.total is None else part.facts
        low = private & (magnitude < median)
        del magnitude
        dropped = drop_mask(r.shape, p, name, int(options.seed), part=part)
        survivors = low & ~dropped
        r.masked_fill_(low.logical_and_(dropped), 0.0)
        del low, dropped
        chunkwise(lambda x, s: x.copy_(torch.where(s, x / (1.0 - p), x)), r, survivors)
        del survivors
    return r.mul_(float(options.scale))
