"""Model cards (README.md) for models written by dots: what was merged, how, by which version.

Used by `dots.merge` and reusable by the search export: pass the method (or "dots"),
its options, the base and sources, and optionally the full run config and results.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Mapping

import yaml

import dots
from dots.plain import to_plain


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


def _is_hub_id(text: str) -> bool:
    return text.count("/") == 1 and not text.startswith((".", "/", "~"))


def render_model_card(
    *,
    method: str,
    options: Mapping[str, Any],
    base: str,
    sources: Mapping[str, str],
    weights: Mapping[str, float] | None = None,
    title: str | None = None,
    description: str | None = None,
    results: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    date: str | None = None,
) -> str:
    """README.md text: YAML front matter (Hub metadata) + method, options, sources, version."""
    tags = list(dict.fromkeys(["dots", "merge", str(method)]))  # once each (the search's method is "dots")
    front: dict[str, Any] = {"library_name": "transformers", "tags": tags}
    hub_bases = [b for b in [base] if _is_hub_id(str(base))]
    if hub_bases:
        front["base_model"] = hub_bases[0]
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", ""]
    lines.append(f"# {title or f'{method} merge'}")
    lines.append("")
    lines.append(description or f"Merged with dots {dots.__version__} using method `{method}`.")
    lines.append("")
    lines += [
        "| | |",
        "|---|---|",
        f"| method | `{method}` |",
        f"| dots version | {dots.__version__} |",
        f"| date | {date or _dt.date.today().isoformat()} |",
        f"| base | `{base}` |",
    ]
    lines.append("")
    lines += ["## Sources", "", "| key | checkpoint | weight |", "|---|---|---|"]
    for key, path in sources.items():
        w = "" if weights is None else f"{weights.get(key, 1.0):g}"
        lines.append(f"| {key} | `{path}` | {w} |")
    lines.append("")
    lines += [
        "## Options",
        "",
        "```yaml",
        yaml.safe_dump(_plain(dict(options)) or {}, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    if results:
        lines += ["## Results", "", "```json", json.dumps(_plain(dict(results)), indent=2), "```", ""]
    if config:
        lines += [
            "## Full configuration",
            "",
            "```yaml",
            yaml.safe_dump(_plain(dict(config)), sort_keys=False).rstrip(),
            "```",
            "",
        ]
    return "\n".join(lines)
