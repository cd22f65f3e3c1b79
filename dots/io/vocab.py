"""The tokenizers of a base and its sources against each other (docs/fuzzing.md, "Against each other").

A merge combines the sources' embedding and lm_head rows with the base's id by id, so an id
must mean the same text in every tokenizer: where it does not, the merged row mixes different
tokens, and that is refused (one line). Differences that leave every shared id meaning the same
text are one warning line per source: its special tokens (bos/eos/pad/unk, the special flag of
added tokens), chat template, splitting rules (normalizer, pre-tokenizer, merges, post-processor),
tokens it lacks, or tokens it adds inside the base's embedding rows (padding rows the base's
tokenizer does not use). Tokens a source adds past the base's rows are the extra vocabulary
`dots.io.align` takes whole from one source (`Alignment.extra_rows`): not a difference here.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dots.errors import DotsError
from dots.io.align import Alignment
from dots.io.metadata import read_json

__all__ = ["Vocabulary", "compare_tokenizers", "differences", "read_vocabulary"]

log = logging.getLogger(__name__)

FILES = (  # what a tokenizer is read from: two directories with the same bytes in each are not compared
    *("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "tokenizer.model"),
    *("vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja", "chat_template.json"),
)
ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")
RULES = ("normalizer", "pre_tokenizer", "model", "post_processor", "decoder")


@dataclass(frozen=True)
class Vocabulary:
    """What of a tokenizer a merge relies on: the text of each id, the special tokens, the chat
    template, and (from tokenizer.json) how text is split into tokens."""

    file: Path
    tokens: dict[int, str]
    roles: dict[str, str | None]
    special: frozenset[int]
    template: str | None
    rules: dict[str, str] | None


def _text(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a text, or an AddedToken's dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_vocabulary(model_dir: Path) -> Vocabulary | None:
    """The tokenizer files of `model_dir` read (tokenizer.json as JSON, `_tokens`; a tokenizer
    without it through transformers' AutoTokenizer), or None when it has none or they do not
    load (`dots.io.inputs.check_tokenizer` refuses a broken tokenizer.json before this runs)."""
    config: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the latter's roles win
        if (model_dir / name).exists():
            found = read_json(model_dir / name, "tokenizer file")
            config.update(found if isinstance(found, dict) else {})
    template = config.get("chat_template")
    if (model_dir / "chat_template.json").exists():  # transformers' own order: the .jinja file wins
        template = (read_json(model_dir / "chat_template.json", "chat template") or {}).get("chat_template")
    if (model_dir / "chat_template.jinja").exists():
        template = (model_dir / "chat_template.jinja").read_text(errors="replace")
    template = template if template is None or isinstance(template, str) else json.dumps(template, sort_keys=True)
    roles = {role: _text(config.get(role)) for role in ROLES}
    file = model_dir / "tokenizer.json"
    if file.exists():
        raw = read_json(file, "tokenizer")
        tokens = _tokens(raw) if isinstance(raw, dict) else None
        if tokens is None:  # a layout this reader does not know: refused by check_tokenizer, or not compared
            return None
        special = frozenset(t["id"] for t in raw.get("added_tokens") or () if isinstance(t, dict) and t.get("special"))
        model = dict(raw.get("model") or {})
        model.pop("vocab", None)
        rules = {part: json.dumps(model if part == "model" else raw.get(part), sort_keys=True) for part in RULES}
        return Vocabulary(file, tokens, roles, special, template, rules)
    if not any(model_dir.glob("vocab.*")) and not (model_dir / "tokenizer.model").exists():
        return None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir))
        vocab = tok.get_vocab()
        special_ids = frozenset(i for i, t in tok.added_tokens_decoder.items() if t.special)
    except Exception as exc:  # no tokenizer transformers knows: nothing to compare
        log.info("%s: its tokenizer does not load (%s); not compared with the others'", model_dir, exc)
        return None
    tokens = {i: text for text, i in vocab.items()}
    return Vocabulary(model_dir, tokens, {r: getattr(tok, r, None) for r in ROLES}, special_ids, template, None)


def _tokens(raw: dict) -> dict[int, str] | None:
    """id -> text of a tokenizer.json as the `tokenizers` library builds it: the model's vocabulary
    (a mapping of texts to ids; Unigram's list of [piece, score], ids in order), then the added
    tokens (None for a layout that is neither)."""
    vocab = (raw.get("model") or {}).get("vocab") if isinstance(raw.get("model"), dict) else None
    if isinstance(vocab, dict):
        tokens = {i: text for text, i in vocab.items() if isinstance(i, int)}
    elif isinstance(vocab, list):
        tokens = {i: entry[0] for i, entry in enumerate(vocab) if isinstance(entry, list) and entry}
    else:
        return None
    for added in raw.get("added_tokens") or ():
        if isinstance(added, dict) and isinstance(added.get("id"), int) and isinstance(added.get("content"), str):
            tokens[added["id"]] = added["content"]
    return tokens


def _same_files(a: Path, b: Path) -> bool:
    """Whether two model directories hold the same tokenizer files, byte for byte."""
    return all(
        (a / n).exists() == (b / n).exists() and (not (a / n).exists() or (a / n).read_bytes() == (b / n).read_bytes())
        for n in FILES
    )


def _ids(ids: list[int]) -> str:
    return f"{len(ids)} (ids {ids[0]}..{ids[-1]})" if len(ids) > 1 else f"1 (id {ids[0]})"


def differences(base: Vocabulary, other: Vocabulary, rows: int, name: str) -> list[str]:
    """What differs between two tokenizers whose shared ids all mean the same text, below `rows`
    (the base's embedding rows); a DotsError when an id below `rows` means different texts."""
    changed = other.tokens.items() - base.tokens.items()  # (id, text) pairs the base does not have
    clash = sorted(i for i, _ in changed if i < rows and i in base.tokens)
    if clash:
        i = clash[0]
        raise DotsError(
            f"{name}'s tokenizer ({other.file}) gives id {i} to {other.tokens[i]!r}, the base's ({base.file}) to "
            f"{base.tokens[i]!r}; {len(clash)} ids differ: merging their embedding rows would mix different "
            "tokens (a source must share the base's vocabulary, and may only add tokens after it)"
        )
    found = []
    inside = sorted(i for i, _ in changed if i < rows)
    if inside:
        found.append(f"adds {_ids(inside)} tokens inside the base's embedding rows, which the base's tokenizer lacks")
    lacking = sorted(base.tokens.keys() - other.tokens.keys())
    if lacking:
        found.append(f"lacks {_ids(lacking)} of the base's tokens")
    roles = [f"{r} {other.roles[r]!r} (base {base.roles[r]!r})" for r in ROLES if other.roles[r] != base.roles[r]]
    flagged = sorted((base.special ^ other.special) & set(base.tokens) & set(other.tokens))
    found += roles + ([f"the special flag of {_ids(flagged)} tokens"] if flagged else [])
    if other.template != base.template:
        found.append("the chat template")
    if base.rules is not None and other.rules is not None:
        rules = [part.replace("_", "-") for part in RULES if base.rules[part] != other.rules[part]]
        found += [f"how text is split ({', '.join(rules)})"] if rules else []
    return found


def compare_tokenizers(alignment: Alignment, rows: int | None) -> list[str]:
    """Each source's tokenizer against the base's (`rows`: the base's embedding rows): a DotsError
    when an id of those rows means different texts; a warning line (returned) per source that
    differs only in what leaves the merged rows sound, or whose added tokens (past `rows`) the
    output does not keep. Checkpoints without tokenizer files are not compared."""
    base, sources = alignment.base, alignment.sources
    if all(_same_files(base.path, ckpt.path) for ckpt in sources.values()):
        return []
    reference = read_vocabulary(base.path)
    if reference is None:
        return []
    limit = rows if rows is not None else max(reference.tokens, default=-1) + 1
    kept = read_vocabulary(alignment.tokenizer_source().path) if alignment.extra_rows else None
    warnings = []
    for key, ckpt in sources.items():
        vocab = None if _same_files(base.path, ckpt.path) else read_vocabulary(ckpt.path)
        if vocab is None:
            continue
        found = differences(reference, vocab, limit, f"source {key}")
        lost = sorted(i for i, t in vocab.tokens.items() if i >= limit and (kept is None or kept.tokens.get(i) != t))
        if lost and alignment.tokenizer_source() is not ckpt:
            found.append(f"the output does not keep its {_ids(lost)} tokens past the base's embedding rows")
        if found:
            warnings.append(
                f"source {key}'s tokenizer ({vocab.file}) differs from the base's: {'; '.join(found)}. Every "
                "shared id means the same text, so the merge is sound, but the output carries one model's tokenizer"
            )
    return warnings
