"""Batched sampling with a KV cache for the lab's tiny models, and a minimal local Engine.

The lab needs its own sampler for GRPO (token ids out, seeded generator, no global RNG)
and for fast training-time evaluation; `LocalEngine` wraps it in the Engine protocol
(dots/engines/base.py) so `dots.lab.score` can use it like any other engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from dots.lab.tokenizer import build_char_tokenizer
from dots.scoring.perplexity import PromptNLL
from dots.scoring.sampling import Sampling

if TYPE_CHECKING:
    from dots.vectors.coefficients import Coefficients

__all__ = ["LocalEngine", "encode"]


def encode(tok, texts: Sequence[str]) -> list[list[int]]:
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _pick(logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # smallest prefix reaching top_p
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


@torch.no_grad()
def sample_ids(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    gen: torch.Generator | None = None,
    chunk: int = 4096,
) -> list[list[int]]:
    """Completion ids per prompt (left-padded batches, KV cache); each stops after its EOS (kept)."""
    out: list[list[int]] = []
    for start in range(0, len(prompts), chunk):
        out += _sample_chunk(
            model, prompts[start : start + chunk], max_new_tokens, eos_id, pad_id, temperature, top_p, gen
        )
    return out


def _sample_chunk(model, prompts, max_new_tokens, eos_id, pad_id, temperature, top_p, gen):
    rows, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    res = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    past, logits = res.past_key_values, res.logits[:, -1]
    next_pos = pos[:, -1:] + 1
    done = torch.zeros(rows, dtype=torch.bool)
    steps = []
    for _ in range(max_new_tokens):
        tok = _pick(logits, temperature, top_p, gen)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        steps.append(tok)
        done |= tok == eos_id
        if bool(done.all()) or len(steps) == max_new_tokens:
            break
        mask = torch.cat([mask, torch.ones((rows, 1), dtype=torch.long)], dim=1)
        res = model(
            input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos, past_key_values=past, use_cache=True
        )
        past, logits = res.past_key_values, res.logits[:, -1]
        next_pos = next_pos + 1
    table = torch.stack(steps, dim=1).tolist()
    out = []
    for row in table:
        seq = []
        for t in row:
            seq.append(t)
            if t == eos_id:
                break
        out.append(seq)
    return out


class LocalEngine:
    """The Engine protocol over an in-process transformers model (lab-sized models only)."""

    def __init__(self, model: torch.nn.Module | str | Path, threads: int | None = None):
        from dots.lab.model import load_model

        if threads:
            torch.set_num_threads(int(threads))
        self.model = load_model(model) if isinstance(model, (str, Path)) else model.eval()
        self.tok = build_char_tokenizer()

    def generate(self, prompts: Sequence[str], sampling: Sampling = Sampling()) -> list[list[str]]:
        n = sampling.n
        gen = torch.Generator().manual_seed(int(sampling.seed or 0))
        ids = [p for p in encode(self.tok, prompts) for _ in range(n)]
        eos, pad = self.tok.eos_token_id, self.tok.pad_token_id
        done = sample_ids(self.model, ids, sampling.max_tokens, eos, pad, sampling.temperature, sampling.top_p, gen)
        texts = self.tok.batch_decode(done, skip_special_tokens=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]

    @torch.no_grad()
    def prompt_nll(self, texts: Sequence[str]) -> list[PromptNLL]:
        out = []
        for ids in encode(self.tok, texts):
            x = torch.tensor([ids])
            logp = torch.log_softmax(self.model(input_ids=x).logits[0, :-1].float(), -1)
            nll = -logp.gather(-1, x[0, 1:, None]).sum().item()
            out.append(PromptNLL(nll=nll, tokens=len(ids) - 1))
        return out

    @torch.no_grad()
    def swap_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = self.model.state_dict()
        for name, tensor in weights:
            params[name].copy_(tensor.to(params[name].dtype))

    def swap_checkpoint(self, path: str | Path) -> None:
        from dots.io.checkpoint import Checkpoint

        self.swap_weights(Checkpoint(path).tensors())

    def swap_coefficients(self, coefficients: Coefficients) -> None:
        raise NotImplementedError("LocalEngine has no task-vector cache; use swap_weights")

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]  # released; the engine is unusable after close(), as HFEngine
