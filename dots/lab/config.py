"""The lab's configuration (conf/lab.yaml + key=value overrides) and its cache keys."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence, cast

from omegaconf import DictConfig, OmegaConf

from dots.errors import DotsError
from dots.keys import stable_hash
from dots.paths import CONF_DIR, DATA_DIR, outputs_root
from dots.plain import to_plain

CONF_PATH = CONF_DIR / "lab.yaml"
SHIPPED = DATA_DIR / "lab"  # the prebuilt trio of conf/lab.yaml's defaults, with its scores.json
STAGES = ("base", "sft", "rlvr")
# The config sections each stage's weights depend on (upstream stages included).
STAGE_SECTIONS = {
    "base": ("seed", "threads", "dtype", "model", "tasks", "base"),
    "sft": ("seed", "threads", "dtype", "model", "tasks", "base", "sft"),
    "rlvr": ("seed", "threads", "dtype", "model", "tasks", "base", "rlvr"),
}


def load_config(overrides: Sequence[str] | None = None) -> DictConfig:
    """conf/lab.yaml with dotted `key=value` overrides applied; unknown keys are an error."""
    cfg = cast(DictConfig, OmegaConf.load(CONF_PATH))  # lab.yaml is a mapping
    OmegaConf.set_struct(cfg, True)
    for item in overrides or []:
        if "=" not in item:
            raise DotsError(f"lab override must be key=value, got {item!r}")
    try:
        update = OmegaConf.from_dotlist([o.lstrip("+") for o in overrides or []])
        _check_types(cfg, update)
        cfg = cast(DictConfig, OmegaConf.merge(cfg, update))
    except Exception as exc:  # unknown keys (struct mode) and type errors from OmegaConf
        first = str(exc).splitlines()[0]
        raise DotsError(f"bad lab override ({first}); see conf/lab.yaml") from None
    check_ranges(cfg)
    model = cfg.model
    if model.hidden_size % model.num_attention_heads or model.hidden_size // model.num_attention_heads < 32:
        raise DotsError("lab model needs head_dim = hidden_size / num_attention_heads >= 32 (vLLM-CPU)")
    if cfg.dtype not in ("bfloat16", "float16", "float32"):
        raise DotsError(f"lab dtype must be bfloat16, float16 or float32, got {cfg.dtype!r}")
    return cfg


# numbers that may be 0 (every other count, rate and size must be > 0); fractions lie in [0, 1]
MAY_BE_ZERO = ("seed", "split_seed", "warmup", "weight_decay", "kl_coef", "temperature", "slip_rate", "two_digit_share")
FRACTIONS = ("slip_rate", "two_digit_share", "add_share", "top_p")


def check_ranges(cfg: DictConfig, prefix: str = "") -> None:
    """Every number of the lab's config finite and in its range (a zero step count would divide
    by zero mid-build): one DotsError line naming the key."""
    for key, value in cfg.items():
        name = f"{prefix}{key!s}"
        if isinstance(value, DictConfig):
            check_ranges(value, f"{name}.")
            continue
        values = list(value) if OmegaConf.is_list(value) else [value]  # type: ignore[arg-type]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            low_ok = v >= 0 if str(key) in MAY_BE_ZERO else v > 0
            if not math.isfinite(v) or not low_ok or (str(key) in FRACTIONS and v > 1):
                bounds = "in [0, 1]" if str(key) in FRACTIONS else ">= 0" if str(key) in MAY_BE_ZERO else "> 0"
                raise DotsError(f"lab config key {name} must be a finite number {bounds}, got {v!r}")


def _check_types(cfg: DictConfig, update: DictConfig, prefix: str = "") -> None:
    """A number stays a number (OmegaConf would silently accept `steps=abc`)."""
    for key, value in update.items():
        if key not in cfg:
            continue  # struct mode reports it
        old = cfg[key]
        if isinstance(value, DictConfig) and isinstance(old, DictConfig):
            _check_types(old, value, f"{prefix}{key!s}.")
        elif (
            isinstance(old, (int, float))
            and not isinstance(old, bool)
            and (isinstance(value, bool) or not isinstance(value, (int, float)))
        ):
            raise DotsError(f"lab config key {prefix}{key!s} must be a number, got {value!r}")
        elif isinstance(old, int) and not isinstance(old, bool) and not isinstance(value, int):
            raise DotsError(f"lab config key {prefix}{key!s} must be an integer, got {value!r}")


def stage_key(cfg: DictConfig, stage: str) -> str:
    """Short hash of the config sections a stage depends on."""
    return stable_hash({k: to_plain(cfg[k], resolve=False) for k in STAGE_SECTIONS[stage]}, 12)


def stage_dir(cfg: DictConfig, stage: str) -> Path:
    """Where a build of this stage goes: <outputs root>/lab/<stage>-<key>."""
    return outputs_root() / "lab" / f"{stage}-{stage_key(cfg, stage)}"


def shipped_dir(cfg: DictConfig, stage: str) -> Path | None:
    """The prebuilt checkpoint of this stage shipped with dots, if its key matches."""
    path = SHIPPED / f"{stage}-{stage_key(cfg, stage)}"
    return path if path.is_dir() else None
