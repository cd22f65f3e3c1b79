"""Diagonal Fisher information of a checkpoint over a calibration set (SAR-Merging Eq. 13).

S_t[j] = E_{(x,y)}[(∂ log p(y | x; θ_t) / ∂θ_j)²], estimated as the mean over the
calibration examples of the squared gradient of the summed log-probability of the
completion tokens y (prompt tokens are context only). y is the gold answer when the
pool has one, else the model's own greedy completion (generated once per model).
One backward pass per example (batch size 1), so each squared gradient is per example.

Calibration set: `dots.merge.calibration` (a configured pool, else built-in arithmetic questions).

Cache: one float32 safetensors file per (model, calibration texts, options) under
`<cache>/fisher/<sha256>.safetensors`, next to the task-vector cache
(`dots.vectors.cache.default_cache_root()`), reused whenever the key matches; of several
processes wanting one entry at once, one computes it while the others wait and read it.

Memory: computing S for one model holds its weights and the float32 accumulator: ≈ 8
bytes per parameter in float32 (7B → ~57 GB; use a large GPU, or `dtype: bfloat16` for
the weights: ≈ 6 bytes per parameter — on a GPU: on a 2-core AVX2 CPU a bfloat16 pass over a
2-layer Qwen2.5-7B-shaped model did not finish in 31 min, float32 took 33 s per model).
The pass runs under `dots.runtime.allocator.freeing_as_it_goes`: its host transients are one-off (on the
CPU at that shape, SAR's peak 14.2 instead of 16.4 GiB, +35% wall). Each parameter's squared
gradient is added to the accumulator (in chunks) as soon as backward has produced it, and the
gradient freed, so the gradients of the whole model never exist at once. SAR's merge pass
then holds, per tensor, the base, both task vectors, both Fisher tensors and the result
(≈ 6–7 float32 copies of the largest tensor; see `dots.merge.methods.sar`).
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from dots.errors import DotsError, first_line
from dots.io.checkpoint import Checkpoint
from dots.io.commit import atomic_file
from dots.io.destination import claim
from dots.io.modes import apply_umask
from dots.io.safetensors import check_data_digest, data_digest, write_file
from dots.keys import stable_hash
from dots.merge.calibration import CalibrationExample
from dots.paths import cache_root
from dots.runtime.allocator import freeing_as_it_goes
from dots.runtime.locks import run_once_lock
from dots.runtime.progress import progress_bar

__all__ = ["FisherTable", "compute_fisher", "fisher_for", "fisher_key"]

log = logging.getLogger(__name__)

FISHER_VERSION = 1
FISHER_CHUNK = 1 << 22  # entries of a gradient squared and added at a time


# --- computation ------------------------------------------------------------------------


def resolve_device(device: str | None) -> str:
    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def _completion_ids(
    model, tok, prompt_ids: torch.Tensor, example: CalibrationExample, max_new_tokens: int
) -> torch.Tensor:
    if example.answer is not None:
        return tok(example.answer, add_special_tokens=False, return_tensors="pt").input_ids[0]
    with torch.no_grad():
        out = model.generate(
            prompt_ids[None].to(model.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        )
    return out[0, prompt_ids.numel() :].cpu()


def compute_fisher(
    model_path: str | os.PathLike,
    examples: Sequence[CalibrationExample],
    device: str = "cpu",
    max_new_tokens: int = 256,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Diagonal Fisher of one model: mean over examples of (∂ Σ_y log p / ∂θ)², float32 on CPU.

    Keys are the model's parameter names (= checkpoint names for Qwen2/Llama; a tied
    lm_head appears once, as the embedding).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not examples:
        raise DotsError("the Fisher calibration set is empty")
    device = resolve_device(device)
    tok = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype).to(device)  # type: ignore[arg-type]  # transformers: `to` is @wraps(Module.to), typed as _Wrapped
    model.eval()  # no dropout: the Fisher of the deterministic model
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros(p.shape, dtype=torch.float32, device=device) for n, p in params.items()}

    def accumulate(name: str) -> Callable[[torch.Tensor], None]:
        def hook(param: torch.Tensor) -> None:  # runs once per backward, when param.grad is complete
            assert param.grad is not None
            acc, grad = total[name].view(-1), param.grad.reshape(-1)
            for start in range(0, grad.numel(), FISHER_CHUNK):  # (grad in float32)², a chunk at a time
                acc[start : start + FISHER_CHUNK].add_(grad[start : start + FISHER_CHUNK].float().pow(2))
            param.grad = None

        return hook

    hooks = [p.register_post_accumulate_grad_hook(accumulate(n)) for n, p in params.items()]
    try:
        used = _accumulate_examples(model, tok, examples, device, max_new_tokens, model_path)
    finally:
        for handle in hooks:
            handle.remove()
    if used == 0:
        raise DotsError(f"no calibration example produced completion tokens for {model_path}")
    return {name: t.div_(used).cpu() for name, t in total.items()}


def _accumulate_examples(model, tok, examples, device: str, max_new_tokens: int, model_path) -> int:
    """One backward pass per example (the hooks of `compute_fisher` add each squared gradient);
    returns how many examples had completion tokens."""
    used = 0
    for example in progress_bar(examples, f"Fisher {Path(str(model_path)).name}"):
        prompt_ids = tok(example.prompt, return_tensors="pt").input_ids[0]
        completion = _completion_ids(model, tok, prompt_ids, example, max_new_tokens)
        if completion.numel() == 0:
            continue
        ids = torch.cat([prompt_ids, completion])[None].to(device)
        logits = model(input_ids=ids).logits[0, prompt_ids.numel() - 1 : -1].float()
        log_p = torch.log_softmax(logits, dim=-1).gather(1, completion.to(device)[:, None]).sum()
        model.zero_grad(set_to_none=True)
        log_p.backward()
        used += 1
    model.zero_grad(set_to_none=True)
    return used


# --- cache ------------------------------------------------------------------------------


def default_fisher_root() -> Path:
    """Where Fisher tables live: <cache root>/fisher."""
    return cache_root() / "fisher"


def fisher_key(
    ckpt: Checkpoint, examples: Sequence[CalibrationExample], max_new_tokens: int, dtype: torch.dtype
) -> str:

    return stable_hash(
        {
            "v": FISHER_VERSION,
            "model": ckpt.fingerprint(),
            "dtype": str(dtype),
            "max_new_tokens": int(max_new_tokens),
            "examples": [[e.prompt, e.answer] for e in examples],
        },
        24,
    )


def fisher_for(
    ckpt: Checkpoint,
    examples: Sequence[CalibrationExample],
    cache_root: str | os.PathLike | None = None,
    device: str = "cpu",
    max_new_tokens: int = 256,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Path of the cached Fisher safetensors of `ckpt`, computed first if absent."""
    root = Path(cache_root) if cache_root is not None else default_fisher_root()
    path = root / f"{fisher_key(ckpt, examples, max_new_tokens, dtype)}.safetensors"
    if path.exists() and _intact(path):
        log.info("reusing cached Fisher %s for %s", path, ckpt.source)
        return path
    # before the work: new, empty, or a Fisher cache (recorded, or an older dots' tables only)
    cache = claim(root, "fisher-cache", inputs=[ckpt.path])
    cache.create()
    with run_once_lock(root / f".{path.stem}.lock"):  # concurrent processes compute an entry once
        if path.exists() and _intact(path):
            log.info("reusing cached Fisher %s for %s (computed meanwhile)", path, ckpt.source)
            return path
        return _compute_and_write(ckpt, examples, path, device, max_new_tokens, dtype)


def _compute_and_write(
    ckpt: Checkpoint,
    examples: Sequence[CalibrationExample],
    path: Path,
    device: str,
    max_new_tokens: int,
    dtype: torch.dtype,
) -> Path:
    """Compute `ckpt`'s Fisher table and write it to `path` atomically (a temporary, renamed)."""
    with freeing_as_it_goes():  # one-off transients (whole-model gradients' pieces): not kept
        fisher = compute_fisher(ckpt.path, examples, device, max_new_tokens, dtype)
        gc.collect()  # the model's weights, before the table is written
    meta = {"model": str(ckpt.path), "examples": str(len(examples)), "sha256": data_digest(fisher)}
    try:
        with atomic_file(path) as tmp:  # synced, then renamed: a reader never sees a half-written file
            write_file(fisher, tmp, meta)
            apply_umask(tmp)
    except OSError as exc:
        raise DotsError(f"cannot write the Fisher cache {path}: {str(exc).splitlines()[0]}") from None
    return path


def _intact(path: Path) -> bool:
    """The cached table's bytes are those written (its digest); a damaged one is removed, said in
    one line, and computed again."""
    try:
        check_data_digest(path)
        return True
    except (DotsError, OSError, ValueError) as exc:
        log.warning("the cached Fisher table %s is damaged (%s); computing it again", path, first_line(exc))
        path.unlink(missing_ok=True)
        return False


class FisherTable:
    """Lazy per-tensor reader of one model's cached Fisher (rows cut to the base's)."""

    def __init__(self, path: str | os.PathLike, renames: Mapping[str, str] | None = None):
        from safetensors import safe_open

        self.path = Path(path)
        self.renames = dict(renames or {})
        with safe_open(str(self.path), framework="pt") as handle:
            self.names = set(handle.keys())

    def get(self, name: str, shape: Sequence[int], rows: tuple[int, int] | None = None) -> torch.Tensor:
        """S of `name` (cut to the base's `shape`), or its rows [r0, r1) when given."""
        from safetensors import safe_open

        key = self.renames.get(name, name)
        if key not in self.names and name == "lm_head.weight":  # tied head: the embedding's Fisher
            key = "model.embed_tokens.weight"
        if key not in self.names:
            raise DotsError(f"the Fisher file {self.path} has no entry for {name}")
        r0, r1 = rows if rows is not None else (0, shape[0] if len(shape) else 0)
        if rows is not None:
            shape = (r1 - r0, *shape[1:])
        with safe_open(str(self.path), framework="pt") as handle:  # closed at once: bounded RSS
            tensor = handle.get_slice(key)[r0:r1] if len(shape) else handle.get_tensor(key)
        if tuple(tensor.shape) != tuple(shape):
            raise DotsError(f"Fisher of {name} has shape {list(tensor.shape)}, expected {list(shape)}")
        return tensor.float()
