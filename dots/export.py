"""Write the picked model as a loadable HF directory with a model card; push it to the Hub.

The weights are θ0 + Σ λ*_i τ̃_i streamed from `dots.synth` into `CheckpointWriter`
(atomic: nothing appears at the output path until every tensor is written). The
tokenizer and generation files come from the base, or, when a source added vocabulary
rows, from that source (the base's tokenizer cannot decode the added tokens). A failed
push keeps the local export and prints the command that retries it.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Any, Mapping

from dots.align import Alignment
from dots.checkpoint import CheckpointWriter
from dots.errors import DotsError
from dots.modelcard import render_model_card
from dots.progress import progress_bar
from dots.synth import synthesize
from dots.taskvec import TaskVectors

log = logging.getLogger(__name__)
MARKER = "dots_export.json"


def write_synthesized(out_dir: Path, tv: TaskVectors, alignment: Alignment, coefficients: Mapping[str, float],
                      config: Mapping[str, Any], card: str, extra_files: Mapping[str, Path] = {},
                      overwrite: bool = True, device: str | None = None,
                      marker: Mapping[str, Any] | None = None) -> Path:
    """θ0 + Σ λ_i τ̃_i with the output's shapes, `config`, `alignment.tokenizer_source()`'s tokenizer, the
    card and `extra_files`; the marker file records the coefficients (and `marker`'s fields)."""
    plan = alignment.out_plan
    with CheckpointWriter(out_dir, plan, overwrite=overwrite) as writer:
        stream = synthesize(tv, coefficients, device=device, base=alignment.base)
        for name, tensor in progress_bar(stream, "export", total=len(plan)):
            writer.write(name, tensor)
        for path in alignment.tokenizer_source().aux_files():
            if path.name != "config.json":
                shutil.copy2(path, writer.tmp_dir / path.name)
        writer.add_file("config.json", json.dumps(dict(config), indent=2))
        writer.add_file("README.md", card)
        for name, path in extra_files.items():
            if Path(path).exists():
                shutil.copy2(path, writer.tmp_dir / name)
        writer.add_file(MARKER, json.dumps({"coefficients": dict(coefficients), **(marker or {})}, sort_keys=True))
        return writer.commit()


def push_to_hub(folder: Path, repo_id: str, private: bool = True) -> str:
    """Create the repo (if needed) and upload the folder; returns the repo URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                      commit_message="Upload model synthesized with dots")
    return str(url)


def try_push(folder: Path, repo_id: str, private: bool) -> bool:
    try:
        url = push_to_hub(folder, repo_id, private)
    except Exception as exc:  # offline, auth, name taken: keep the export, say how to retry
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"push to {repo_id} failed: {first}\n  the model is kept at {folder}\n"
              f"  retry with: python -m dots.export push {folder} {repo_id}" + (" --private" if private else ""),
              file=sys.stderr)
        return False
    print(f"pushed to {url}")
    return True


def export_model(cfg: Any, tv: TaskVectors, alignment: Alignment, result: Mapping[str, Any], run_dir: Path,
                 selection_size: int) -> Path:
    """The search's export stage; skipped when the model there already has these coefficients."""
    from omegaconf import OmegaConf

    out = Path(str(cfg.export.dir)) if cfg.export.dir else run_dir / "model"
    coefficients = {k: float(v) for k, v in result["coefficients"].items()}
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("coefficients") == coefficients:
        print(f"export: {out} is up to date")
    else:
        backbone = cfg.backbone
        card = render_model_card(
            method="dots", options={"sparsify": OmegaConf.to_container(cfg.sparsify), "pick": cfg.pick},
            base=str(backbone.base), sources={k: str(v) for k, v in backbone.sources.items()}, weights=coefficients,
            title=f"DoTS synthesis of {backbone.name}",
            description=("Decoupled test-time synthesis (DoTS): θ = θ0 + Σ λ_i τ̃_i with sparsified, "
                         "norm-rescaled task vectors; λ chosen on the Pareto front of answer consistency and "
                         f"perplexity over {selection_size} unlabeled queries.\n\n![Pareto front](pareto.png)"),
            results={"trial": result["trial"], "coefficients": coefficients, "objectives": result["objectives"],
                     "selection_size": selection_size, "complete_trials": result["complete_trials"]},
            config=OmegaConf.to_container(cfg, resolve=True),
        )
        config = alignment.output_config(str(backbone.get("config_from", "base")))
        write_synthesized(out, tv, alignment, coefficients, config, card, {"pareto.png": run_dir / "pareto.png"},
                          device=cfg.export.get("device"))
        print(f"export: {out}")
    if cfg.export.push_to_hub:
        try_push(out, str(cfg.export.push_to_hub), bool(cfg.export.private))
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    from dots.errors import cli_errors

    parser = argparse.ArgumentParser(prog="python -m dots.export")
    sub = parser.add_subparsers(dest="cmd", required=True)
    push = sub.add_parser("push", help="upload an exported model directory to the Hub")
    push.add_argument("folder")
    push.add_argument("repo_id")
    push.add_argument("--private", action="store_true")
    args = parser.parse_args(argv)

    @cli_errors
    def run() -> None:
        folder = Path(args.folder)
        if not (folder / "config.json").exists():
            raise DotsError(f"not an exported model directory: {folder}")
        if not try_push(folder, args.repo_id, args.private):
            sys.exit(1)

    run()


if __name__ == "__main__":
    main()
