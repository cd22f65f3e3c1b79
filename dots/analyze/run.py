"""`python -m dots.analyze`: task-vector analysis of a base and its sources (docs/method.md §6).

Streams τ_i = θ_i − θ0 in float32, one bounded chunk at a time, in three passes, so a
7B trio is analysed in a few hundred MB of RAM:
  1. norms, sparsity at ε, overlap, pairwise signs / regions / cosine / conflict norm,
     and the high-bit histograms of |τ|;
  2. the low-bit histograms (exact global top-k thresholds, see `dots.analyze.topk`)
     and sparsity at the relative threshold;
  3. the top-fraction masks: module-wise activation and sign interference.
Writes `analysis.json` and the figures (PNG) into the output directory. A rerun with the
same inputs and options reuses analysis.json and only redraws missing figures.

Roles: the SFT/RLVR metrics of DoTS §2 (norm ratio, sign interference vs retention) need
to know which source is which (`roles.sft`, `roles.rlvr`; `roles: null` skips them).
The other metrics cover every source (overlap) or every pair of sources (regions,
cosine, conflict norm).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from itertools import combinations
from pathlib import Path
from typing import Mapping

from dots.analyze.counts import (
    PairCounts,
    SignInterference,
    SourceCounts,
    TopKState,
    count_pass1,
    count_pass2,
    count_pass3,
)
from dots.analyze.report import build_report
from dots.analyze.stream import plan_chunks, task_vector_chunks
from dots.errors import DotsError
from dots.io.align import align
from dots.io.checkpoint import Checkpoint
from dots.io.commit import write_atomic
from dots.io.destination import claim, input_paths
from dots.io.inputs import check_checkpoint
from dots.keys import stable_hash
from dots.options.analyze import AnalyzeConfig
from dots.vectors.masks import TopKMask
from dots.vectors.topk import RadixSelect

__all__ = ["AnalyzeConfig", "analyze", "compute_analysis"]

log = logging.getLogger(__name__)

REPORT_NAME = "analysis.json"
REPORT_VERSION = 1


def _open(ckpt: Checkpoint | str | os.PathLike, revision: str | None = None) -> Checkpoint:
    return ckpt if isinstance(ckpt, Checkpoint) else Checkpoint(ckpt, revision)


def _input_key(base: Checkpoint, sources: Mapping[str, Checkpoint], cfg: AnalyzeConfig) -> str:

    options = {f: v for f, v in asdict(cfg).items() if f not in ("chunk_entries", "figures")}
    payload = {
        "v": REPORT_VERSION,
        "base": base.fingerprint(),
        "sources": {k: c.fingerprint() for k, c in sources.items()},
        "options": options,
    }
    return stable_hash(payload, 20)


def compute_analysis(base: Checkpoint, sources: Mapping[str, Checkpoint], cfg: AnalyzeConfig) -> dict:
    """All docs/method.md §6 metrics for `base` and `sources`, streamed (three passes)."""
    keys = list(sources)
    cfg.validate(keys)
    al = align(base, sources)
    names = al.merged
    chunks = plan_chunks(al, cfg.chunk_entries)
    numel = sum(base.info(n).numel for n in names)
    pairs = list(combinations(keys, 2))
    roles = cfg.roles

    top_k = {k: round(cfg.top_fraction * numel) for k in keys}
    retention_k = [round(r * numel) for r in cfg.retentions]
    selectors = {k: RadixSelect([1, top_k[k]] + (retention_k if roles and k == roles[0] else [])) for k in keys}
    source_counts = {n: {k: SourceCounts() for k in keys} for n in names}
    pair_counts = {n: {p: PairCounts() for p in pairs} for n in names}

    for chunk, taus in task_vector_chunks(al, chunks, "analyze 1/3 (norms, signs, overlap)"):
        count_pass1(taus, cfg.eps, source_counts[chunk.name], pair_counts[chunk.name], selectors)
    for _, taus in task_vector_chunks(al, chunks, "analyze 2/3 (top-k thresholds)"):
        count_pass2(taus, selectors)
    thresholds = {k: selectors[k].thresholds() for k in keys}
    max_abs = {k: thresholds[k][1].value if thresholds[k][1].k else 0.0 for k in keys}

    relative_cut = {k: cfg.relative_eps * max_abs[k] for k in keys} if cfg.relative_eps is not None else None
    top_masks = {k: TopKMask(thresholds[k][top_k[k]]) for k in keys}
    interference = None
    if roles:
        sft, rlvr = roles
        masks = [TopKMask(thresholds[sft][k]) for k in retention_k]
        interference = SignInterference(sft, rlvr, list(cfg.retentions), masks)
    state = TopKState(top_masks, interference)
    for chunk, taus in task_vector_chunks(al, chunks, "analyze 3/3 (top-k masks)"):
        count_pass3(taus, source_counts[chunk.name], state, relative_cut)

    report = build_report(
        names=names,
        keys=keys,
        source_counts=source_counts,
        pair_counts=pair_counts,
        thresholds=thresholds,
        top_k=top_k,
        max_abs=max_abs,
        interference=interference,
        eps=cfg.eps,
        relative_eps=cfg.relative_eps,
        top_fraction=cfg.top_fraction,
        roles=roles,
    )
    report["copied_tensors"] = len(al.copied)
    return report


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1))


def analyze(
    base: Checkpoint | str | os.PathLike,
    sources: Mapping[str, Checkpoint | str | os.PathLike],
    out_dir: str | os.PathLike | None = None,
    cfg: AnalyzeConfig = AnalyzeConfig(),
    revision: str | Mapping[str, str | None] | None = None,
    force: bool = False,
    config: Mapping | None = None,
) -> dict:
    """Analyse the task vectors of `sources` over `base`; write analysis.json + figures.

    Returns the report (the content of analysis.json). With `out_dir`, a report of the
    same inputs and options already there is reused unless `force`. `config` (the CLI's
    resolved config) is stored in the report as is.
    """
    if not sources:
        raise DotsError("no source checkpoints given")
    rev = revision if isinstance(revision, Mapping) else {"base": revision, **{k: revision for k in sources}}
    base_ckpt = _open(base, rev.get("base"))
    source_ckpts = {str(k): _open(v, rev.get(k)) for k, v in sources.items()}
    cfg.validate(list(source_ckpts))
    for ckpt in (base_ckpt, *source_ckpts.values()):
        check_checkpoint(ckpt)  # config.json against the weights, before the output is claimed
    key = _input_key(base_ckpt, source_ckpts, cfg)
    # new, empty or an analysis's (reused): never a folder of other files or a model's
    inputs = input_paths([base_ckpt, *source_ckpts.values()])
    destination = claim(out_dir, "analyze", inputs=inputs) if out_dir is not None else None
    out = destination.path if destination is not None else None
    report_path = out / REPORT_NAME if out is not None else None
    report = None
    reused = False
    if report_path is not None and report_path.exists() and not force:
        previous = json.loads(report_path.read_text())
        if previous.get("input_key") == key:
            log.info("reusing %s (same inputs and options)", report_path)
            report, reused = previous, True
    if report is None:
        report = compute_analysis(base_ckpt, source_ckpts, cfg)
        report = {
            "version": REPORT_VERSION,
            "input_key": key,
            "inputs": {"base": base_ckpt.source, "sources": {k: c.source for k, c in source_ckpts.items()}},
            "options": {f: v for f, v in asdict(cfg).items() if f != "figures"},
            **({"config": dict(config)} if config is not None else {}),
            **report,
        }
        if report_path is not None:
            assert destination is not None  # report_path is set only with out
            destination.create()
            _write_json(report_path, report)
    if out is not None and cfg.figures:
        from dots.analyze.figures import draw_all

        drawn = draw_all(report, out, only_missing=reused)
        log.info("figures: %s", ", ".join(p.name for p in drawn))
    return report
