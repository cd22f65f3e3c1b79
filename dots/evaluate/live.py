"""One engine, many models: swap a model in when it fits the live one, restart otherwise.

A model is swapped in (`swap_checkpoint`) when it has the live model's architecture,
tensors, shapes, dtypes, config and tokenizer (checked with dots.io.align); else the
engine is restarted, and the run says why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.keys import stable_hash
from dots.options.engine import EngineOptions, engine_options

if TYPE_CHECKING:
    from dots.engines.base import Engine

__all__ = ["LiveEngine", "swap_incompatibility"]

log = logging.getLogger("dots.evaluate")


# files whose content decides how text becomes tokens and back (and when generation stops);
# for JSON files only the listed keys count (None: all keys but the ignored ones)
_TOKENIZER_FILES: dict[str, tuple[str, ...] | None] = {
    "tokenizer.json": None,
    "tokenizer_config.json": None,
    "special_tokens_map.json": None,
    "added_tokens.json": None,
    "vocab.json": None,
    "merges.txt": None,
    "tokenizer.model": None,
    "generation_config.json": ("bos_token_id", "eos_token_id", "pad_token_id"),
}
_IGNORED_TOKENIZER_KEYS = {
    "name_or_path",
    "_name_or_path",
    "model_max_length",
    "chat_template",
    "padding",
    "truncation",
    "padding_side",
    "truncation_side",
    "clean_up_tokenization_spaces",
}


def tokenizer_identity(ckpt: Checkpoint, chat_template: bool = False) -> dict[str, str]:
    """Hashes of what a model's tokenizer and stop tokens depend on (the chat template only if asked)."""
    out = {}
    ignored = _IGNORED_TOKENIZER_KEYS - ({"chat_template"} if chat_template else set())
    for name, keys in _TOKENIZER_FILES.items():
        path = ckpt.path / name
        if not path.is_file():
            continue
        raw = path.read_bytes()
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            out[name] = hashlib.sha256(raw).hexdigest()[:16]
            continue
        if isinstance(obj, dict):
            obj = {k: v for k, v in obj.items() if (k in keys if keys else k not in ignored)}
        out[name] = stable_hash(obj)
    if chat_template and (ckpt.path / "chat_template.jinja").is_file():
        out["chat_template.jinja"] = hashlib.sha256((ckpt.path / "chat_template.jinja").read_bytes()).hexdigest()[:16]
    return out


def swap_incompatibility(
    live: Checkpoint, other: Checkpoint, check_dtypes: bool = True, chat_template: bool = False
) -> str | None:
    """Why `other` cannot be swapped into an engine running `live`, or None when it can: another
    architecture, tensor set, shape, dtype (when the engine keeps the checkpoint's), config field,
    tokenizer, or stop token."""
    from dots.io.align import align, config_differences

    if live.path.resolve() == other.path.resolve():
        return None
    try:
        alignment = align(live, {"next": other})
    except DotsError as exc:
        return str(exc)
    if set(live.names) != set(other.names):
        extra = sorted(set(other.names) ^ set(live.names))
        return f"different tensor names (e.g. {extra[0]})"
    if alignment.extra_rows:
        return f"different vocabulary size ({next(iter(alignment.extra_rows))})"
    if check_dtypes:
        odd = [n for n in live.names if live.info(n).dtype != other.info(n).dtype]
        if odd:
            return f"different dtype ({odd[0]}: {live.info(odd[0]).dtype} vs {other.info(odd[0]).dtype})"
    diffs = config_differences(live, {"next": other})
    if diffs:
        field = next(iter(diffs))
        return f"config field {field} differs ({diffs[field]['base']!r} vs {diffs[field].get('next')!r})"
    mine, theirs = tokenizer_identity(live, chat_template), tokenizer_identity(other, chat_template)
    if mine != theirs:
        odd = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return f"different tokenizer or stop tokens ({', '.join(odd)})"
    return None


class LiveEngine:
    """The run's engine: started on the first model, swapped to later ones when compatible."""

    def __init__(
        self,
        engine: EngineOptions | Mapping[str, Any],
        factory: Callable[..., Engine] | None = None,
        chat_template: bool = False,
        log_dir: str | Path | None = None,
    ):
        import functools

        from dots.engines.factory import build_engine

        self.engine_options = engine if isinstance(engine, EngineOptions) else engine_options(engine)
        self.factory = factory or functools.partial(build_engine, log_dir=log_dir)
        self.engine: Engine | None = None
        self.live: Checkpoint | None = None
        self.starts = 0
        self.check_dtypes = self.engine_options.dtype == "auto"  # else the engine casts every model
        self.chat_template = chat_template

    def activate(self, name: str, path: str | Path) -> Engine:
        ckpt = Checkpoint(path)
        if self.engine is not None:
            assert self.live is not None  # set together with self.engine
            reason = swap_incompatibility(self.live, ckpt, self.check_dtypes, self.chat_template)
            if reason is None:
                if self.live.path.resolve() != ckpt.path.resolve():
                    t0 = time.perf_counter()
                    self.engine.swap_checkpoint(ckpt.path)
                    log.info("%s: weights swapped into the live engine (%.1f s)", name, time.perf_counter() - t0)
                self.live = ckpt
                return self.engine
            print(f"{name}: starting a new engine ({reason})")
            self.close()
        t0 = time.perf_counter()
        self.engine = self.factory(self.engine_options, ckpt.path)
        self.starts += 1
        self.live = ckpt
        log.info("%s: engine started (%.1f s)", name, time.perf_counter() - t0)
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None
        self.live = None
