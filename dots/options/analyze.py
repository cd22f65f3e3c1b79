"""`python -m dots.analyze`'s options (dots/conf/analyze.yaml + the command line), checked once:
`AnalyzeConfig` (the analysis of docs/method.md §6) and `AnalyzeOptions` (what to analyse, where
the report goes). Each value is checked here with a one-line error naming it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig

from dots.checks import check_flag, finite_number, number_in, positive_int
from dots.errors import DotsError
from dots.options.backbone import Backbone, backbone_from, resolve_config, setting

__all__ = ["AnalyzeConfig", "AnalyzeOptions", "analyze_options"]

DEFAULT_RETENTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class AnalyzeConfig:
    """Options of docs/method.md §6 (the defaults are conf/analyze.yaml's).

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
        """Every value in its range, and the roles naming two different sources of `source_keys`."""
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


@dataclass(frozen=True)
class AnalyzeOptions:
    """One analysis: the backbone's sources over its base, into `output` (reused unless `force`);
    `config` is the resolved configuration, stored in the report."""

    backbone: Backbone
    output: Path
    force: bool
    analysis: AnalyzeConfig
    config: Mapping[str, Any]


def _role(roles: Mapping[str, Any], key: str) -> str | None:
    value = roles.get(key)  # None: the role is not given (roles=null skips both)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
        raise DotsError(f"roles.{key} must be a source key, got {value!r}")
    return None if value is None else str(value)


def analyze_options(cfg: DictConfig) -> AnalyzeOptions:
    """The checked options of a composed conf/analyze.yaml."""
    plain = resolve_config(cfg)
    backbone = backbone_from(plain, "pick a backbone, e.g. backbone=lab, or set backbone.base=...")
    if not backbone.sources:
        raise DotsError("backbone.sources is not set (pick a backbone, e.g. backbone=lab, or set backbone.sources=...)")
    roles = setting(plain, "roles") or {}
    if not isinstance(roles, Mapping):
        raise DotsError(f"roles must be a mapping (sft, rlvr) or null, got {roles!r}")
    retentions = setting(plain, "retentions")
    if not isinstance(retentions, list):
        raise DotsError(f"retentions must be a non-empty list of fractions in (0, 1], got {retentions!r}")
    relative_eps = setting(plain, "relative_eps")
    analysis = AnalyzeConfig(
        sft=_role(roles, "sft"),
        rlvr=_role(roles, "rlvr"),
        eps=number_in(setting(plain, "eps"), "eps", 0.0, float("inf")),
        relative_eps=None if relative_eps is None else number_in(relative_eps, "relative_eps", 0.0, 1.0, True, True),
        top_fraction=number_in(setting(plain, "top_fraction"), "top_fraction", 0.0, 1.0, low_open=True),
        retentions=tuple(finite_number(r, "retentions") for r in retentions),
        chunk_entries=positive_int(setting(plain, "chunk_entries"), "chunk_entries"),
        figures=check_flag(setting(plain, "figures"), "figures"),
    )
    analysis.validate(list(backbone.sources))
    if not setting(plain, "output"):
        raise DotsError("output is not set (add output=DIR)")
    return AnalyzeOptions(
        backbone=backbone,
        output=Path(str(setting(plain, "output"))),
        force=check_flag(setting(plain, "force"), "force"),
        analysis=analysis,
        config=plain,
    )
