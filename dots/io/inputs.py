"""Inputs checked against each other before any work (docs/fuzzing.md, "against each other").

Each file of a checkpoint may be well formed alone and still contradict another: a
config.json whose hidden size, vocabulary, layer count or attention biases disagree with the
weights' names and shapes (transformers would drop or re-initialise tensors on load), a
tokenizer that does not load or has more tokens than the config's vocabulary, sources that
equal the base (a task vector of zeros) or each other, or whose tokenizers give the base's ids
other texts (`dots.io.vocab`), destinations that are the same
directory or lie inside an output replaced whole. Each contradiction is one DotsError line
naming the file or option; the odd-but-valid cases are one warning line.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping

import torch

from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.contents import resolved
from dots.io.destination import RECORD, Destination, hashed_names, read_record
from dots.io.metadata import read_json
from dots.io.vocab import compare_tokenizers

__all__ = [
    "check_checkpoint",
    "check_config_against_weights",
    "check_distinct_destinations",
    "check_sources_differ",
    "taskvec_dir",
]

log = logging.getLogger("dots.inputs")

LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
ATTENTION_BIAS = re.compile(r"\.q_proj\.bias$")
EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
# model types whose attention projections carry biases (True) or not (False) when the config
# has no `attention_bias` field
BIASED = {"qwen2": True, "qwen2_moe": True, "llama": False, "mistral": False, "mixtral": False}
COMPARE_ENTRIES = 1 << 22  # rows compared at a time when two checkpoints' weights are compared


# --- one checkpoint: config.json against the weights, the tokenizer against config.json ---------


def _embedding(ckpt: Checkpoint) -> str | None:
    names = [n for n in ckpt.names if n.endswith(EMBEDDINGS) and len(ckpt.info(n).shape) == 2]
    return names[0] if names else None


def check_config_against_weights(ckpt: Checkpoint) -> None:
    """config.json's hidden_size, vocab_size, num_hidden_layers and attention biases agree with
    the tensors the weights hold, else one DotsError line naming config.json and a tensor."""
    file = ckpt.path / "config.json"
    if not file.exists():
        return
    config = ckpt.config
    embed = _embedding(ckpt)
    if embed is not None:
        rows, width = ckpt.info(embed).shape
        for key, have in (("hidden_size", width), ("vocab_size", rows)):
            want = config.get(key)
            if isinstance(want, int) and want != have:
                raise DotsError(
                    f"{file}: {key} is {want} but the weights' {embed} has shape [{rows}, {width}] "
                    f"(config.json and the weights are of different models)"
                )
    layers = {int(m.group(1)) for m in map(LAYER.search, ckpt.names) if m}
    want_layers = config.get("num_hidden_layers")
    if layers and isinstance(want_layers, int) and max(layers) + 1 != want_layers:
        raise DotsError(f"{file}: num_hidden_layers is {want_layers} but the weights hold {max(layers) + 1} layers")
    biases = [n for n in ckpt.names if ATTENTION_BIAS.search(n)]
    model_type = str(config.get("model_type", ""))
    expected = config.get("attention_bias", BIASED.get(model_type))
    if isinstance(expected, bool) and layers and expected != bool(biases):
        if biases:
            raise DotsError(
                f"{file}: a {model_type or '?'} config without attention biases, but the weights hold "
                f"{biases[0]}: loading would drop them (config.json belongs to another architecture)"
            )
        raise DotsError(
            f"{file}: a {model_type or '?'} config with attention biases, but the weights hold no "
            f"q_proj.bias: loading would initialise them at random (config.json belongs to another architecture)"
        )


def check_tokenizer(model_dir: Path, vocab_size: int | None) -> None:
    """tokenizer.json (and tokenizer_config.json) load, and the tokenizer's ids fit the
    config's vocabulary (an id beyond it has no embedding row); nothing to check without one."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (model_dir / name).exists():
            read_json(model_dir / name, "tokenizer file")
    file = model_dir / "tokenizer.json"
    if not file.exists():
        return
    from tokenizers import Tokenizer

    read_json(file, "tokenizer")  # not JSON: its line and column
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust library's own message
        raise DotsError(f"{file} does not load as a tokenizer: {str(exc).splitlines()[0][:200]}") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if isinstance(vocab_size, int) and size > vocab_size:
        raise DotsError(
            f"{file} has {size} tokens but {model_dir / 'config.json'} has vocab_size {vocab_size} "
            "(the tokenizer belongs to another model)"
        )


def check_checkpoint(ckpt: Checkpoint) -> Checkpoint:
    """Every file of one checkpoint against the others (config.json, weights, tokenizer)."""
    check_config_against_weights(ckpt)
    vocab = ckpt.config.get("vocab_size") if (ckpt.path / "config.json").exists() else None
    embed = _embedding(ckpt)
    check_tokenizer(ckpt.path, ckpt.info(embed).shape[0] if embed else vocab)
    return ckpt


# --- sources against the base and each other ------------------------------------------------------


def same_weights(a: Checkpoint, b: Checkpoint, names: Iterable[tuple[str, str]]) -> bool:
    """Whether tensors `names` ((name in a, name in b) pairs) are bit for bit equal, over a's
    rows; read block by block, smallest tensors first (fine-tunes differ early and cheaply)."""
    if a.path == b.path:
        return True
    for name_a, name_b in sorted(names, key=lambda p: a.info(p[0]).nbytes):
        info_a, info_b = a.info(name_a), b.info(name_b)
        if info_a.dtype != info_b.dtype or info_a.shape[1:] != info_b.shape[1:] or not info_a.shape:
            if info_a != info_b or not _bits(a.get(name_a)).equal(_bits(b.get(name_b))):
                return False
            continue
        step = max(1, COMPARE_ENTRIES // max(1, math.prod(info_a.shape[1:])))
        for start in range(0, info_a.shape[0], step):
            x, y = a.get_rows(name_a, start, start + step), b.get_rows(name_b, start, start + step)
            if x.shape != y.shape or not _bits(x).equal(_bits(y)):
                return False
    return True


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers of its width (so a NaN equals itself, -0.0 differs from 0.0)."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().reshape(-1).view(width)


def check_sources_differ(alignment) -> list[str]:
    """An error when every source equals the base (a merge would be the base) or a source's tokenizer
    gives an id of the base's another text (`dots.io.vocab`); a warning line (returned, and printed
    on stderr) for a source equal to the base (its task vector is all zeros), two identical sources,
    or a tokenizer that differs harmlessly. `alignment`: a `dots.io.align.Alignment`."""
    base, sources = alignment.base, alignment.sources
    embed = _embedding(base)
    tokenizers = compare_tokenizers(alignment, base.info(embed).shape[0] if embed else None)  # before any weight
    pairs = {key: [(n, alignment.source_name(key, n)) for n in alignment.merged] for key in sources}
    zero = [key for key in sources if same_weights(base, sources[key], [(n, s) for n, s in pairs[key]])]
    if len(zero) == len(sources):
        raise DotsError(
            f"every source ({', '.join(f'{k}={sources[k].path}' for k in zero)}) has the base's weights "
            f"({base.path}): every task vector is zero, there is nothing to merge"
        )
    warnings = tokenizers + [
        f"source {key} ({sources[key].path}) has the base's weights: its task vector is all zeros" for key in zero
    ]
    keys = [k for k in sources if k not in zero]
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            names = [(alignment.source_name(first, n), alignment.source_name(second, n)) for n in alignment.merged]
            if same_weights(sources[first], sources[second], names):
                warnings.append(
                    f"sources {first} and {second} have identical weights ({sources[first].path}, "
                    f"{sources[second].path}): the merge counts one model twice"
                )
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return warnings


# --- the cache root: one meaning of `cache_dir` for every command -----------------------------------

CACHE_PARTS = ("taskvec", "fisher")  # what a cache root holds: τ̃ entries, SAR's Fisher tables


def taskvec_dir(cache_dir: str | os.PathLike | None, inputs: Iterable[Path] = ()) -> Path:
    """Where the τ̃ entries of `cache_dir=` live: <cache_dir>/taskvec for every command (beside
    <cache_dir>/fisher), <cache root>/taskvec when it is not given. The root must be new, empty
    or hold only dots' caches (checked like any destination, `inputs` the checkpoints read). An
    older search's layout, entries right in `cache_dir`, is read where it is: nothing moved or
    deleted."""
    from dots.paths import cache_root

    if cache_dir is None or str(cache_dir) == "":
        return cache_root() / "taskvec"
    root = resolved(cache_dir, "cache_dir")
    older = hashed_names(20)
    record = read_record(root)
    entries = [p.name for p in root.iterdir()] if root.is_dir() else []
    if (record or {}).get("kind") == "taskvec-cache" or (record is None and any(map(older, entries))):
        log.info("cache_dir %s holds τ̃ entries in the older layout: read where they are", root)
        return root
    parts = lambda name: name in CACHE_PARTS or name.startswith(RECORD)  # noqa: E731
    Destination(root, "taskvec-cache", inputs=tuple(inputs), given=str(cache_dir), own=parts).check()
    return root / "taskvec"


# --- destinations against each other ---------------------------------------------------------------


def check_distinct_destinations(destinations: Mapping[str, tuple[str | os.PathLike | None, str]]) -> None:
    """Destinations (option -> (path, how it is written: "whole", "grows" or "cache")) are not
    the same directory, and none lies inside an output replaced whole or inside a cache;
    checked before any is claimed, so nothing is written when two collide."""
    paths = {
        option: (resolved(path, option), how) for option, (path, how) in destinations.items() if path not in (None, "")
    }
    items = list(paths.items())
    for i, (first, (a, how_a)) in enumerate(items):
        for second, (b, how_b) in items[i + 1 :]:
            if a == b:
                raise DotsError(f"{first} and {second} are the same directory ({a}): give each its own")
            for inner, outer, (x, y, how) in ((first, second, (a, b, how_b)), (second, first, (b, a, how_a))):
                if y in x.parents and how in ("whole", "cache"):
                    kind = "an output replaced whole" if how == "whole" else "a cache"
                    raise DotsError(f"{inner} ({x}) lies inside {outer} ({y}), {kind}: choose a directory outside it")
