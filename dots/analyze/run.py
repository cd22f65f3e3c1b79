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
from dataclasses import asdict, dataclass
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
from dots.io.destination import claim, input_paths
from dots.io.inputs import check_checkpoint
from dots.keys import stable_hash
from dots.options.compose import check_backbone_sources
from dots.plain import to_plain
from dots.vectors.masks import TopKMask
from dots.vectors.topk import RadixSelect

log = logging.getLogger(__name__)

REPORT_NAME = "analysis.json"
REPORT_VERSION = 1
DEFAULT_RETENTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class AnalyzeConfig:
    """Options of docs/method.md §6.

    sft / rlvr: source keys for the two-source DoTS metrics (None skips them).
    eps: |τ| > eps counts as changed (seeds 000/003: 1e-5).
    relative_eps: also count sparsity with |τ| > relative_eps·max|τ_i| (seed 002 uses
      0.01; max over the whole task vector); None skips it.
    top_fraction: the global top fraction for module activation (Fig. 1c) and the RLVR
      side of sign interference (Fig. 1b).
    retentions: SFT retention levels of Fig. 1b.
    chunk_entries: entries per streamed chunk (memory knob; results do not depend on it).
    """

    sft: str | None = "sft"
    rlvr: str | None = "rlvr"
    eps: float = 1e-5
    relative_eps: float | None = None
    top_fraction: float = 0.1
    retentions: tuple[float, ...] = DEFAULT_RETENTIONS
    chunk_entries: int = 1 << 22
    figures: bool = True

    def validate(self, source_keys: list[str]) -> None:
        if not self.eps >= 0:
            raise DotsError(f"eps must be >= 0, got {self.eps}")
        if self.relative_eps is not None and not 0 < self.relative_eps < 1:
            raise DotsError(f"relative_eps must be in (0, 1) or null, got {self.relative_eps}")
        if not 0 < self.top_fraction <= 1:
            raise DotsError(f"top_fraction must be in (0, 1], got {self.top_fraction}")
        if not self.retentions or any(not 0 < r <= 1 for r in self.retentions):
            raise DotsError(f"retentions must be a non-empty list of fractions in (0, 1], got {list(self.retentions)}")
        if self.chunk_entries < 1:
            raise DotsError(f"chunk_entries must be >= 1, got {self.chunk_entries}")
        if (self.sft is None) != (self.rlvr is None):
            raise DotsError("roles: give both sft and rlvr, or neither (roles=null)")
        if self.sft is not None:
            for role, key in (("sft", self.sft), ("rlvr", self.rlvr)):
                if key not in source_keys:
                    raise DotsError(
                        f"roles.{role}={key!r} is not a source (sources: {', '.join(source_keys)}); "
                        "set roles.sft/roles.rlvr to source keys, or roles=null to skip the SFT/RLVR metrics"
                    )
            if self.sft == self.rlvr:
                raise DotsError(f"roles.sft and roles.rlvr are the same source ({self.sft!r})")

    @property
    def roles(self) -> tuple[str, str] | None:
        return (self.sft, self.rlvr) if self.sft is not None and self.rlvr is not None else None


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
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


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


# --- CLI ----------------------------------------------------------------------------------


def _config_from_hydra(cfg) -> tuple[AnalyzeConfig, dict]:
    from omegaconf.errors import OmegaConfBaseException

    check_backbone_sources(cfg)
    try:
        plain = to_plain(cfg)
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DotsError):
            raise cause from None
        raise DotsError(f"bad config: {str(exc).splitlines()[0]}") from None
    backbone = plain.get("backbone") or {}
    for needed in ("base", "sources"):
        if not backbone.get(needed):
            raise DotsError(
                f"backbone.{needed} is not set (pick a backbone, e.g. backbone=lab, or set backbone.{needed}=...)"
            )
    if not isinstance(backbone["sources"], dict):
        raise DotsError("backbone.sources must be a mapping of source key -> path or Hub id")
    roles = plain.get("roles") or {}
    analysis = AnalyzeConfig(
        sft=roles.get("sft"),
        rlvr=roles.get("rlvr"),
        eps=float(plain.get("eps", 1e-5)),
        relative_eps=None if plain.get("relative_eps") is None else float(plain["relative_eps"]),
        top_fraction=float(plain.get("top_fraction", 0.1)),
        retentions=tuple(float(r) for r in plain.get("retentions", DEFAULT_RETENTIONS)),
        chunk_entries=int(plain.get("chunk_entries", 1 << 22)),
        figures=bool(plain.get("figures", True)),
    )
    return analysis, plain


def run_from_config(cfg) -> dict:
    """The CLI body: analyse the configured backbone into `output`."""
    analysis, plain = _config_from_hydra(cfg)
    backbone = plain["backbone"]
    report = analyze(
        backbone["base"],
        backbone["sources"],
        plain["output"],
        analysis,
        revision=backbone.get("revision"),
        force=bool(plain.get("force", False)),
        config=plain,
    )
    out = Path(plain["output"]).resolve()
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {out / REPORT_NAME}")
    return report
