"""Builds (or finds in the cache) the lab's base / SFT / RLVR checkpoints."""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from dots.errors import DotsError
from dots.io.destination import claim, read_record
from dots.lab.config import STAGES, LabOptions, load_config, shipped_dir, stage_dir, stage_key
from dots.paths import check_creatable

if TYPE_CHECKING:
    import torch

__all__ = ["torch_threads"]

# torch / transformers are imported where training happens, so a cached call stays instant.


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch computes on `n` threads inside the block (the lab's `threads`), as before it after."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive file lock, so concurrent callers build a stage once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _train_stage(cfg: LabOptions, stage: str, base_dir: Path | None) -> tuple[torch.nn.Module, dict]:
    from dots.lab import tasks as T
    from dots.lab import train
    from dots.lab.model import load_model, new_model
    from dots.lab.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    splits = {s: T.split_problems(cfg.tasks, s)["train"] for s in T.SKILLS}
    c = cfg.plain()
    if stage == "base":
        model = new_model(cfg.model, tok, cfg.seed)
        return model, train.pretrain(model, tok, c, splits)
    assert base_dir is not None  # every stage but base starts from the base build
    model = load_model(base_dir)
    fn = train.sft if stage == "sft" else train.grpo
    return model, fn(model, tok, c, splits)


def build_stage(cfg: LabOptions, stage: str) -> Path:
    """The stage's checkpoint directory, trained now unless already cached."""
    out = stage_dir(cfg, stage)
    if out.is_dir():
        return check_build(out)
    claim(out, "lab")  # before any training: a path dots may write (`dots.io.destination`)
    check_creatable(out.parent, "lab outputs directory")
    base_dir = build_stage(cfg, "base") if stage != "base" else None
    with _lock(out.parent / f".{out.name}.lock"):
        if out.is_dir():  # built by another process while we waited
            return check_build(out)
        with torch_threads(cfg.threads):
            start = time.perf_counter()
            model, metrics = _train_stage(cfg, stage, base_dir)
            seconds = time.perf_counter() - start
        info = {
            "stage": stage,
            "key": stage_key(cfg, stage),
            "seconds": round(seconds, 2),
            "metrics": metrics,
            "config": cfg.plain(),
        }
        from dots.lab.model import save_model

        return save_model(model, out, cfg.dtype, info)


def check_build(out: Path) -> Path:
    """A build found on disk still holds every file its record lists (a user may have removed
    its weights): else one DotsError line naming the missing file."""
    record = read_record(out) or {}
    missing = [name for name in record.get("files") or () if not (out / name).exists()]
    if missing:
        raise DotsError(f"the lab build {out} lacks {out / missing[0]}: remove the folder to build it again")
    return out


def ensure_trio(overrides: Sequence[str] | None = None, shipped: bool = True) -> dict[str, Path]:
    """Paths of the base, SFT and RLVR checkpoints for conf/lab.yaml + overrides: the trio
    shipped with dots when it is the one asked for (and `shipped`), else built on demand
    under <outputs root>/lab (and reused from there)."""
    cfg = load_config(overrides)
    return {stage: (shipped and shipped_dir(cfg, stage)) or build_stage(cfg, stage) for stage in STAGES}
