"""A checkpoint's JSON files checked field by field: config.json and the safetensors index.

dots, transformers and vLLM read these fields as numbers, flags and names; a wrong type
(a text where a count belongs, a NaN, a list where a name belongs) would otherwise surface
as a traceback deep inside an engine, after the run directory exists. Each check is a
one-line DotsError naming the file and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from dots.errors import DotsError

__all__ = ["CONFIG_FIELDS", "check_config", "read_json"]

# field -> (what it must be, test); a field that is absent or null is not checked
Check = tuple[str, Callable[[Any], bool]]


def _int(minimum: int) -> Check:
    return f"an integer >= {minimum}", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _number(minimum: float, low_open: bool = False) -> Check:
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return v > minimum if low_open else v >= minimum

    return f"a finite number {'>' if low_open else '>='} {minimum:g}", ok


TEXT: Check = ("a text", lambda v: isinstance(v, str))
FLAG: Check = ("true or false", lambda v: isinstance(v, bool))
MAPPING: Check = ("a JSON object", lambda v: isinstance(v, dict))
NAMES: Check = (
    "a list of names",
    lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
)
TOKEN_IDS: Check = (
    "a token id (an integer >= 0) or a list of them",
    lambda v: _int(0)[1](v) or (isinstance(v, list) and all(_int(0)[1](x) for x in v)),
)
CONFIG_FIELDS: dict[str, Check] = {
    "architectures": NAMES,
    "model_type": TEXT,
    **{k: _int(1) for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")},
    **{k: _int(1) for k in ("num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")},
    **{k: _int(0) for k in ("sliding_window", "max_window_layers")},
    **{k: TOKEN_IDS for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
    **{k: FLAG for k in ("tie_word_embeddings", "use_cache", "use_sliding_window", "attention_bias", "mlp_bias")},
    "rms_norm_eps": _number(0, low_open=True),
    "rope_theta": _number(0, low_open=True),
    "attention_dropout": _number(0),
    "initializer_range": _number(0),
    **{k: TEXT for k in ("torch_dtype", "dtype", "hidden_act")},
    **{k: MAPPING for k in ("rope_scaling", "rope_parameters")},
    "layer_types": NAMES,
}


def read_json(file: Path, what: str) -> Any:
    """A JSON file's content, or a one-line DotsError (unreadable, not UTF-8, not JSON)."""
    try:
        return json.loads(file.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise DotsError(f"cannot read {what} {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DotsError(f"{file} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DotsError(f"{file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a number too long to convert, nesting too deep
        raise DotsError(f"{file} is not readable JSON ({type(exc).__name__})") from None


def check_config(data: Any, file: Path) -> dict:
    """config.json: a JSON object whose known fields have their types (`CONFIG_FIELDS`)."""
    if not isinstance(data, dict):
        raise DotsError(f"{file} is not a JSON object")
    for key, (what, ok) in CONFIG_FIELDS.items():
        value = data.get(key)
        if value is not None and not ok(value):
            raise DotsError(f"{file}: field {key} must be {what}, got {_short(value)}")
    return data


def check_weight_map(data: Any, file: Path) -> dict[str, str]:
    """model.safetensors.index.json: {"weight_map": {tensor name: shard file name in the same
    directory}}; returns the weight map."""
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise DotsError(f"{file}: needs a JSON object with a `weight_map` object (tensor name -> shard file)")
    weight_map = data["weight_map"]
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(".safetensors") or Path(shard).name != shard:
            raise DotsError(
                f"{file}: weight_map[{name!r}] must name a .safetensors file beside the index, got {_short(shard)}"
            )
    if not weight_map:
        raise DotsError(f"{file}: the weight_map is empty")
    return weight_map


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
