"""The lab's three training stages: base pretraining, SFT and RLVR (GRPO).

All three train a float32 master copy; the caller stores the result in the configured
dtype (bf16 by default), and SFT / RLVR start from the *stored* base, so an entry the
fine-tuning moved by less than half a bf16 step reads back exactly as the base's.
"""

from __future__ import annotations

import math
import random
import time
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dots.lab import tasks as T
from dots.lab.sampling import encode, sample_ids

__all__ = ["group_advantages"]


class _Bar:
    """A rich progress bar per stage; where stdout is no terminal, a line every ~10% instead."""

    def __init__(self, description: str, total: int):
        self.description, self.total, self.done, self.info = description, total, 0, ""
        self.live = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self.start = time.perf_counter()

    def __enter__(self) -> _Bar:
        if self.live.console.is_terminal:
            self.live.start()
            self.task = self.live.add_task(self.description, total=self.total, info="")
        return self

    def advance(self, info: str) -> None:
        self.done += 1
        if self.live.console.is_terminal:
            self.live.update(self.task, advance=1, info=info)
        elif self.done % max(1, self.total // 10) == 0 or self.done == self.total:
            print(
                f"{self.description}: {self.done}/{self.total} {info} ({time.perf_counter() - self.start:.0f} s)",
                flush=True,
            )

    def __exit__(self, *exc) -> None:
        if self.live.console.is_terminal:
            self.live.stop()


def _batch(tok, prompts: Sequence[str], completions: Sequence[str], prompt_loss: bool):
    """Right-padded ids, attention mask and a mask of the positions that carry loss."""
    p_ids, c_ids = encode(tok, prompts), encode(tok, completions)
    seqs = [p + c + [tok.eos_token_id] for p, c in zip(p_ids, c_ids)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids, dtype=torch.bool)
    for i, (seq, p) in enumerate(zip(seqs, p_ids)):
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        loss_mask[i, (1 if prompt_loss else len(p)) : len(seq)] = True
    return ids, attn, loss_mask


def _token_logp(model, ids, attn) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, <t]) at every position t >= 1 (column 0 is zero)."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return F.pad(logp, (1, 0))


def _optimizer(model, lr: float, weight_decay: float):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))


def _lm_step(model, opt, tok, prompts, completions, prompt_loss: bool) -> float:
    ids, attn, mask = _batch(tok, prompts, completions, prompt_loss)
    loss = -(_token_logp(model, ids, attn) * mask).sum() / mask.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def pretrain(model, tok, cfg: Mapping, train: Mapping[str, list[T.Problem]]) -> dict:
    """Next-token training on the broad, slip-bearing corpus (cosine schedule with warmup)."""
    b = cfg["base"]
    rng = random.Random(f"{cfg['seed']}:base")
    opt = _optimizer(model, float(b["lr"]), float(b["weight_decay"]))
    steps, warm = int(b["steps"]), int(b["warmup"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warm)) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))
    )
    model.train()
    losses = []
    with _Bar("lab base", steps) as bar:
        for _step in range(steps):
            texts = T.pretraining_batch(rng, cfg["tasks"], train, int(b["batch_size"]))
            cut = [t.index("=") + 1 for t in texts]
            losses.append(
                _lm_step(
                    model,
                    opt,
                    tok,
                    [t[:c] for t, c in zip(texts, cut)],
                    [t[c:] for t, c in zip(texts, cut)],
                    prompt_loss=True,
                )
            )
            sched.step()
            bar.advance(f"loss {losses[-1]:.3f}")
    model.eval()
    return {"final_loss": sum(losses[-20:]) / len(losses[-20:])}


def sft(model, tok, cfg: Mapping, train: Mapping[str, list[T.Problem]]) -> dict:
    """Supervised fine-tuning on correct answers (A-heavy), loss on completions only."""
    s = cfg["sft"]
    rng = random.Random(f"{cfg['seed']}:sft")
    data = T.sft_examples(rng, train, int(s["examples"]), float(s["add_share"]))
    bs, epochs = int(s["batch_size"]), int(s["epochs"])
    per_epoch = math.ceil(len(data) / bs)
    opt = _optimizer(model, float(s["lr"]), float(s["weight_decay"]))
    model.train()
    losses = []
    with _Bar("lab sft", epochs * per_epoch) as bar:
        for _ in range(epochs):
            rng.shuffle(data)
            for i in range(0, len(data), bs):
                chunk = data[i : i + bs]
                losses.append(
                    _lm_step(model, opt, tok, [p for p, _ in chunk], [c for _, c in chunk], prompt_loss=False)
                )
                bar.advance(f"loss {losses[-1]:.3f}")
    model.eval()
    return {"final_loss": sum(losses[-10:]) / len(losses[-10:]), "examples": len(data)}


def group_advantages(reward: torch.Tensor, group: int) -> torch.Tensor:
    """GRPO's A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-6), groups of `group` consecutive samples.

    A group whose rewards are all equal gets A = 0: it carries no learning signal.
    """
    grouped = reward.view(-1, group)
    centred = grouped - grouped.mean(1, keepdim=True)
    return (centred / (grouped.std(1, unbiased=False, keepdim=True) + 1e-6)).view(-1)


def grpo(model, tok, cfg: Mapping, train: Mapping[str, list[T.Problem]]) -> dict:
    """GRPO on the verifiable reward of skill `rlvr.skill` (1 if the boxed integer is right).

    Per step: P prompts x G samples from the current policy at `temperature`; advantage
    A = (r - mean_group) / (std_group + 1e-6); loss = -Σ A·log π(token) / #tokens (one
    on-policy update per batch, so the PPO ratio is 1 and clipping never binds); optional
    k3 KL to the base weighted by `kl_coef` (0 by default).
    """
    r = cfg["rlvr"]
    rng = random.Random(f"{cfg['seed']}:rlvr")
    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    problems = train[r["skill"]]
    n_prompts, group = int(r["prompts_per_step"]), int(r["samples_per_prompt"])
    opt = _optimizer(model, float(r["lr"]), 0.0)
    kl_coef = float(r["kl_coef"])
    ref = None
    if kl_coef > 0:
        import copy

        ref = copy.deepcopy(model).eval().requires_grad_(False)
    rewards_log = []
    with _Bar("lab rlvr", int(r["steps"])) as bar:
        for _ in range(int(r["steps"])):
            batch = rng.sample(problems, n_prompts)
            prompt_ids = [p for p in encode(tok, [q.prompt for q in batch]) for _ in range(group)]
            model.eval()
            comps = sample_ids(
                model,
                prompt_ids,
                int(r["max_tokens"]),
                tok.eos_token_id,
                tok.pad_token_id,
                float(r["temperature"]),
                float(r["top_p"]),
                gen,
            )
            texts = tok.batch_decode(comps, skip_special_tokens=True)
            gold = [q.answer for q in batch for _ in range(group)]
            reward = torch.tensor([float(T.extract_answer(t) == g) for t, g in zip(texts, gold)])
            rewards_log.append(reward.mean().item())
            adv = group_advantages(reward, group)
            if adv.abs().sum() > 0:
                model.train()
                ids, attn, mask = _completion_batch(tok, prompt_ids, comps)
                logp = _token_logp(model, ids, attn)
                loss = -(adv[:, None] * logp * mask).sum() / mask.sum()
                if ref is not None:
                    with torch.no_grad():
                        ref_logp = _token_logp(ref, ids, attn)
                    diff = ref_logp - logp
                    loss = loss + kl_coef * ((diff.exp() - diff - 1) * mask).sum() / mask.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            recent = rewards_log[-10:]
            bar.advance(f"reward {sum(recent) / len(recent):.3f} (last 10 steps)")
    model.eval()
    k = max(1, len(rewards_log) // 10)
    return {"reward_first": sum(rewards_log[:k]) / k, "reward_last": sum(rewards_log[-k:]) / k}


def _completion_batch(tok, prompt_ids, comps):
    width = max(len(p) + len(c) for p, c in zip(prompt_ids, comps))
    ids = torch.full((len(comps), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompt_ids, comps)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attn[i, : len(p) + len(c)] = 1
        mask[i, len(p) : len(p) + len(c)] = 1.0
    return ids, attn, mask
