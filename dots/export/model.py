"""Write a synthesized model θ0 + Σ λ_i τ̃_i as a loadable HF directory with a model card.

The weights stream from `dots.vectors.synth` into `CheckpointWriter` (atomic: nothing
appears at the output path until every tensor is written). The tokenizer and generation
files come from the base, or, when a source added vocabulary rows, from that source (the
base's tokenizer cannot decode the added tokens). A marker file records the coefficients:
one λ per source, or one per source and module group (`dots.vectors.coefficients`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping

from dots.export.card import render_model_card
from dots.io.align import Alignment
from dots.io.destination import Destination, claim, input_paths
from dots.io.writer import CheckpointWriter
from dots.options.search import ExportOptions
from dots.runtime.progress import progress_bar
from dots.vectors.cache import TaskVectors
from dots.vectors.coefficients import Coefficients, check_coefficients
from dots.vectors.synth import synthesize

__all__ = ["export_destination", "export_model", "write_synthesized"]

log = logging.getLogger(__name__)
MARKER = "dots_export.json"


def write_synthesized(
    out_dir: Path | Destination,
    tv: TaskVectors,
    alignment: Alignment,
    coefficients: Coefficients,
    config: Mapping[str, Any],
    card: str,
    extra_files: Mapping[str, Path] = {},
    overwrite: bool = False,
    device: str | None = None,
    marker: Mapping[str, Any] | None = None,
    kind: str = "export",
    run_dir: Path | None = None,
) -> Path:
    """θ0 + Σ λ_i τ̃_i with the output's shapes, `config`, `alignment.tokenizer_source()`'s tokenizer, the
    card and `extra_files`; the marker file records the coefficients (and `marker`'s fields).
    `out_dir` is claimed (`dots.io.destination.claim`) unless it is a Destination already."""
    plan = alignment.out_plan
    if not isinstance(out_dir, Destination):
        inputs = input_paths([alignment.base, *alignment.sources.values()])
        out_dir = claim(out_dir, kind, overwrite, inputs, run_dir)
    with CheckpointWriter(out_dir, plan) as writer:
        stream = synthesize(tv, coefficients, device=device, base=alignment.base)
        for name, tensor in progress_bar(stream, "export", total=len(plan)):
            writer.write(name, tensor)
        for path in alignment.tokenizer_source().aux_files():
            if path.name != "config.json":
                writer.copy_file(path)
        writer.add_file("config.json", json.dumps(dict(config), indent=2))
        writer.add_file("README.md", card)
        for name, path in extra_files.items():
            if Path(path).exists():
                writer.copy_file(path, name)
        writer.add_file(MARKER, json.dumps({"coefficients": dict(coefficients), **(marker or {})}, sort_keys=True))
        return writer.commit()


def export_destination(export: ExportOptions, alignment: Alignment, run_dir: Path) -> Destination:
    """The search's export directory, claimed: export.dir or <run_dir>/model; an export of
    this same run is replaced by a rerun, another only with export.overwrite=true."""
    out = Path(export.dir) if export.dir else run_dir / "model"
    inputs = input_paths([alignment.base, *alignment.sources.values()])
    return claim(out, "export", export.overwrite, inputs, run_dir)


def export_model(
    config: Mapping[str, Any],
    export: ExportOptions,
    tv: TaskVectors,
    alignment: Alignment,
    result: Mapping[str, Any],
    run_dir: Path,
    selection: list[str],
    config_from: str,
) -> Path:
    """The search's export stage: the pick θ0 + Σ λ*_i τ̃_i with its card (`config`: the search's
    whole resolved config, as plain data) and Pareto plot (`selection`: the ids of the adaptation
    queries); the output's config.json is `config_from`'s (base or a source key)."""
    out = export_destination(export, alignment, run_dir)
    coefficients = check_coefficients(tv, result["coefficients"])  # λ* per source, or per source and module group
    backbone = config["backbone"]
    card = render_model_card(
        method="dots",
        options={"sparsify": config["sparsify"], "pick": config["pick"]},
        base=str(backbone["base"]),
        sources={k: str(v) for k, v in backbone["sources"].items()},
        weights=coefficients,
        revisions=alignment.revisions(),
        title=f"DoTS synthesis of {backbone['name']}",
        description=(
            "Decoupled test-time synthesis (DoTS): θ = θ0 + Σ λ_i τ̃_i with sparsified, "
            "norm-rescaled task vectors; λ chosen on the Pareto front of answer consistency and "
            f"perplexity over {len(selection)} unlabeled queries.\n\n![Pareto front](pareto.png)"
            + ("\n\n![Trials in λ space](landscape.png)" if (run_dir / "landscape.png").is_file() else "")
            + uncertainty_line(result.get("uncertainty"))
            + "".join(f"\n\n**Warning:** {w}" for w in result.get("warnings", []))
        ),
        results={
            "trial": result["trial"],
            "coefficients": coefficients,
            "objectives": result["objectives"],
            "complete_trials": result["complete_trials"],
            **({"uncertainty": result["uncertainty"]} if result.get("uncertainty") else {}),
            **({"warnings": result["warnings"]} if result.get("warnings") else {}),
            "selection": {"size": len(selection), "strategy": str(config["selection"]["strategy"]), "ids": selection},
        },
        config=dict(config),
        base_dir=alignment.base.path,
        swap_canary=result.get("swap_canary"),
    )
    write_synthesized(
        out,
        tv,
        alignment,
        coefficients,
        alignment.output_config(config_from),
        card,
        {name: run_dir / name for name in ("pareto.png", "landscape.png") if (run_dir / name).is_file()},
        device=export.device,
    )
    print(f"export: {out.path}")
    return out.path


def uncertainty_line(uncertainty: dict | None) -> str:
    """The card's sentence on how sure the pick is: its C with a 95% interval, and where it comes from."""
    if not uncertainty or "interval" not in uncertainty:
        return ""
    lo, hi = uncertainty["interval"]
    how = {"confirmation": "re-scored with fresh samples after the search", "search": "the search's own samples"}
    return (
        f"\n\nThe pick's consistency: {uncertainty['consistency']:.3f} (95% interval {lo:.3f}–{hi:.3f} over "
        f"{uncertainty.get('queries', '?')} queries; {how.get(uncertainty.get('from', ''), '')})."
    )
