"""Model cards (README.md) for models written by dots, in the Hub's own format.

The card is a `huggingface_hub.ModelCard` whose metadata (`ModelCardData`) follows the
Hub's conventions for merges: `base_model` lists the base and every source that is a Hub
id, `base_model_relation: merge`, and `tags` hold `merge` and the method once each. The
body records what a reader needs to reproduce the model: each checkpoint with its
revision (the commit of a Hub snapshot), the coefficients (with a table of λ per module
group when a source has one per group: search.granularity=module), the options, and for a
DoTS export the objectives, the selection and the Pareto plot shipped next to the weights.
Used by `dots.merge` and by the search's export stage.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Mapping

import yaml

import dots
from dots.io.modules import MODULE_GROUPS
from dots.plain import to_plain
from dots.vectors.coefficients import Coefficients

__all__ = ["base_licence", "render_model_card"]


def _plain(value: Any) -> Any:
    """OmegaConf containers, paths and tuples → plain YAML-safe values."""
    value = to_plain(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def is_hub_id(text: str) -> bool:
    """`org/name` and not an existing or explicitly relative/absolute path."""
    return text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).exists()


def base_licence(model_dir: str | Path | None) -> dict[str, str]:
    """The `license` (with `license_name`/`license_link` for `other`) of the model card in
    `model_dir` (README.md's YAML front matter); {} when there is no card or it names none.
    A derivative inherits its base's licence terms, so the merged card repeats them."""
    card = Path(model_dir) / "README.md" if model_dir is not None else None
    if card is None or not card.is_file():
        return {}
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return {}
    try:
        meta = yaml.safe_load(text.split("---", 2)[1]) if text.count("---") >= 2 else None
    except yaml.YAMLError:
        return {}
    if not isinstance(meta, Mapping) or not meta.get("license"):
        return {}
    fields = ("license", "license_name", "license_link")
    return {f: str(meta[f]) for f in fields if meta.get(f)}


def _licence_cell(licence: Mapping[str, str]) -> str:
    if not licence:
        return "not stated (the base model's card names none: check its terms and the sources')"
    name = licence.get("license_name") or licence["license"]
    link = licence.get("license_link")
    return f"`{name}` (the base model's{f', {link}' if link else ''})"


def _yaml_block(value: Any) -> list[str]:
    return ["```yaml", yaml.safe_dump(_plain(value) or {}, sort_keys=False).rstrip(), "```", ""]


def _weight_cell(weights: Coefficients | None, key: str) -> str:
    """A source's coefficient in the checkpoints table: its λ, `per module group` when it has one
    per group (listed in `_module_table`), empty without weights."""
    if weights is None:
        return ""
    value = weights.get(key, 1.0)
    return "per module group" if isinstance(value, Mapping) else f"{float(value):.6g}"


def _module_table(weights: Coefficients | None) -> list[str]:
    """`## Coefficients per module group`: one row per source given λ per group (attention, mlp,
    embed_head = embeddings and LM head, norm); nothing when no source is."""
    per_group = {k: v for k, v in (weights or {}).items() if isinstance(v, Mapping)}
    if not per_group:
        return []
    lines = [
        "## Coefficients per module group",
        "",
        "| source | " + " | ".join(MODULE_GROUPS) + " |",
        "|---|" + "---|" * len(MODULE_GROUPS),
    ]
    for key, groups in per_group.items():
        lines.append(f"| {key} | " + " | ".join(f"{float(groups[g]):.6g}" for g in MODULE_GROUPS) + " |")
    return [*lines, ""]


def render_model_card(
    *,
    method: str,
    options: Mapping[str, Any],
    base: str,
    sources: Mapping[str, str],
    weights: Coefficients | None = None,
    revisions: Mapping[str, str | None] | None = None,
    title: str | None = None,
    description: str | None = None,
    results: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    date: str | None = None,
    base_dir: str | Path | None = None,
    swap_canary: str | None = None,
) -> str:
    """README.md text of a merged model: Hub metadata + checkpoints, revisions, coefficients,
    options, results and the full configuration. `revisions` maps "base" and each source key
    to the commit it was read at (None: a local directory); `base_dir`, the base's local
    directory, gives the licence (`base_licence`); `swap_canary`: the search engine's proof
    that its weight swaps reached the model (`dots.engines.canary`)."""
    from huggingface_hub import ModelCard, ModelCardData

    revisions = dict(revisions or {})
    hub_models = [m for m in dict.fromkeys([str(base), *map(str, sources.values())]) if is_hub_id(m)]
    licence = base_licence(base_dir)
    data = ModelCardData(
        license=licence.get("license"),
        license_name=licence.get("license_name"),
        license_link=licence.get("license_link"),
        library_name="transformers",
        base_model=hub_models or None,
        tags=list(dict.fromkeys(["merge", "dots", str(method)])),
        base_model_relation="merge" if hub_models else None,
    )
    body = [f"# {title or f'{method} merge'}", ""]
    body += [description or f"Merged with dots {dots.__version__} using method `{method}`.", ""]
    body += [
        "| | |",
        "|---|---|",
        f"| method | `{method}` |",
        f"| dots version | {dots.__version__} |",
        f"| licence | {_licence_cell(licence)} |",
        f"| date | {date or _dt.date.today().isoformat()} |",
        *([f"| swap canary | {swap_canary} |"] if swap_canary else []),
        "",
        "## Checkpoints",
        "",
        "| role | checkpoint | revision | coefficient |",
        "|---|---|---|---|",
        f"| base | `{base}` | {revisions.get('base') or '—'} | |",
    ]
    for key, path in sources.items():
        body.append(f"| {key} | `{path}` | {revisions.get(key) or '—'} | {_weight_cell(weights, key)} |")
    body += ["", *_module_table(weights)]
    body += ["## Options", "", *_yaml_block(dict(options))]
    if results:
        body += ["## Results", "", "```json", json.dumps(_plain(dict(results)), indent=2), "```", ""]
    if config:
        body += ["## Full configuration", "", *_yaml_block(dict(config))]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)
