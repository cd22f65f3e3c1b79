"""The tensor-by-tensor comparison of benchmarks/merge/mergekit.py: dots' and mergekit's merged
tensors read one row chunk at a time — bit-identical share, bf16 ulps, and the entries where the
two definitions may disagree (trim ties, zero sign sums) against those that differ elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from benchmarks.merge.mergekit_runs import SOURCES, Case
from dots.io.checkpoint import Checkpoint
from dots.vectors.topk import global_kth_largest

CHUNK = 1 << 22  # entries compared at a time


@dataclass
class Comparison:
    size: str
    case: str
    rule: str
    tensors: int
    entries: int
    identical: int
    over_ulp: int
    max_abs: float
    max_ulps: float
    worst_tensor: str
    dots_changed: int  # entries of dots' output that differ from the base
    mk_changed: int  # same for mergekit's
    allowed: int  # entries where the definitions may differ (rule of the case)
    unexplained: int | None  # entries that differ outside `allowed` (None: rule "random")
    only_in_one: list[str]


def bf16_ulp(magnitude: torch.Tensor) -> torch.Tensor:
    """The bf16 ulp of each float32 magnitude: 2^(e−8) for x in [2^(e−1), 2^e)."""
    _, exponent = torch.frexp(magnitude)
    return torch.ldexp(torch.ones_like(magnitude), exponent - 8)


def row_chunks(ckpt: Checkpoint, name: str) -> Iterator[tuple[int, int]]:
    shape = ckpt.info(name).shape
    rows = shape[0] if shape else 1
    per_row = max(1, ckpt.info(name).numel // max(rows, 1))
    step = max(1, CHUNK // per_row)
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def delta_rows(name: str, base: Checkpoint, source: Checkpoint) -> Iterator[torch.Tensor]:
    for start, stop in row_chunks(base, name):
        yield (source.get_rows(name, start, stop).float() - base.get_rows(name, start, stop).float()).reshape(-1)


def trim_threshold(name: str, base: Checkpoint, source: Checkpoint, density: float) -> float:
    """dots' k-th largest |τ| (k = round(density·n)); 0 when everything is kept."""
    n = base.info(name).numel
    k = round(density * n)
    if k >= n:
        return 0.0
    if k <= 0:
        return float("inf")
    return global_kth_largest(lambda: delta_rows(name, base, source), k)[0]


def allowed_mask(rule: str, base: torch.Tensor, deltas: list[torch.Tensor], thresholds: list[float]) -> torch.Tensor:
    """Entries where the two definitions may disagree (rules "ties" and "sign").

    ties: an entry whose |τ_i| equals τ_i's trim threshold (> 0) may be kept by one tool and
    not the other (floor vs round k, unstable argsort vs lower index first); everywhere else
    both keep exactly the entries above the threshold. Then, with those trims, an entry whose
    kept values are not all zero but sum to exactly 0 is + in mergekit and 0 in dots.
    """
    tied = torch.zeros(base.shape, dtype=torch.bool)
    kept = []
    for delta, threshold in zip(deltas, thresholds if rule == "ties" else [0.0] * len(deltas)):
        magnitude = delta.abs()
        if threshold > 0:
            tied |= magnitude == threshold
        kept.append(delta * (magnitude > threshold))
    total = torch.stack(kept).sum(0)
    zero_sum = (total == 0) & torch.stack([k != 0 for k in kept]).any(0)
    return tied | zero_sum


def compare(size: str, case: Case, dots_dir: Path, mk_dir: Path, root: Path) -> Comparison:
    ours, theirs, base = Checkpoint(dots_dir), Checkpoint(mk_dir), Checkpoint(root / "base")
    sources = [Checkpoint(root / s) for s in SOURCES]
    common = [n for n in ours.names if n in theirs]
    only = sorted(set(ours.names) ^ set(theirs.names))
    result = Comparison(
        size,
        case.label,
        case.rule,
        len(common),
        0,
        0,
        0,
        0.0,
        0.0,
        "",
        0,
        0,
        0,
        None if case.rule == "random" else 0,
        only,
    )
    for name in common:
        if ours.info(name).shape != theirs.info(name).shape:
            raise SystemExit(
                f"{case.label}: {name} has shape {ours.info(name).shape} in dots' output, "
                f"{theirs.info(name).shape} in mergekit's"
            )
        thresholds = [trim_threshold(name, base, src, case.density) for src in sources] if case.rule == "ties" else []
        for start, stop in row_chunks(ours, name):
            a = ours.get_rows(name, start, stop).float()
            b = theirs.get_rows(name, start, stop).float()
            theta0 = base.get_rows(name, start, stop).float()
            diff = (a - b).abs()
            ulps = diff / bf16_ulp(torch.maximum(a.abs(), b.abs()))
            result.entries += a.numel()
            result.identical += int((a == b).sum())
            result.over_ulp += int((ulps > 1).sum())
            result.dots_changed += int((a != theta0).sum())
            result.mk_changed += int((b != theta0).sum())
            if diff.numel() and float(diff.max()) > result.max_abs:
                result.max_abs, result.worst_tensor = float(diff.max()), name
            if ulps.numel():
                result.max_ulps = max(result.max_ulps, float(ulps.nan_to_num(0.0).max()))
            if case.rule in ("ties", "sign"):
                deltas = [src.get_rows(name, start, stop).float() - theta0 for src in sources]
                allowed = allowed_mask(case.rule, theta0, deltas, thresholds)
                result.allowed += int(allowed.sum())
                result.unexplained += int(((a != b) & ~allowed).sum())
            elif case.rule == "exact":
                result.unexplained += int((a != b).sum())
    return result


def equality_table(comparisons: list[Comparison]) -> list[str]:
    lines = [
        "| size | method | tensors | entries | bit-identical | > 1 bf16 ulp | max \\|Δ\\| (ulps) | worst tensor "
        "| may differ by definition | differ elsewhere | ≠ base: dots / mergekit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        n = max(c.entries, 1)
        extra = f" (+{len(c.only_in_one)} in one output only)" if c.only_in_one else ""
        allowed = {"exact": "none", "random": "all (random masks)"}.get(c.rule, f"{c.allowed / n:.2e}")
        elsewhere = "—" if c.unexplained is None else f"{c.unexplained:,}"
        lines.append(
            f"| {c.size} | {c.case} | {c.tensors}{extra} | {c.entries:,} | {c.identical / n:.6f} "
            f"| {c.over_ulp / n:.2e} | {c.max_abs:.3g} ({c.max_ulps:.3g}) | {c.worst_tensor or '—'} "
            f"| {allowed} | {elsewhere} | {c.dots_changed / n:.3f} / {c.mk_changed / n:.3f} |"
        )
    return lines
