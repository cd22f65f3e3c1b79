"""The transformers engine: one live `AutoModelForCausalLM`, weights copied in place.

Generation is batched with left padding and the KV cache (`model.generate`), with a
generation config built here (no top-k, no repetition penalty: the same sampling as
vLLM's `SamplingParams`), so greedy outputs match the vLLM engine's. Prompt NLL is one
forward pass per batch (right padding). A swap copies each tensor into the existing
parameter storage (`param.copy_`), so nothing is re-allocated and the next call sees
only the new weights (HF builds a fresh KV cache per `generate`). With τ̃ resident
(`synth_cache: memory`, in `resident_form`: dense, sparse, index or bitmask, `dots.vectors.forms`),
θ0 + Σλτ̃ is written straight into the parameters a block at a time (no full-size temporary).
Runs on CPU or CUDA.
The public loading path (`swap_path` "public", the swap canary's check and fallback) hands the
tensors to the model's own `load_state_dict` instead.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import torch

from dots.engines.base import check_swappable
from dots.engines.canary import broken_swap
from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.options.engine import DTYPES, EngineOptions
from dots.scoring.perplexity import PromptNLL
from dots.scoring.sampling import Sampling
from dots.vectors.coefficients import Coefficients

if TYPE_CHECKING:
    from dots.vectors.synth import ResidentSynthesizer

__all__ = ["HFEngine", "resolve_dtype"]

log = logging.getLogger(__name__)


def resolve_dtype(dtype: str | torch.dtype | None) -> str | torch.dtype:
    """engine.dtype (`dots.options.engine.DTYPES`, or a torch dtype) as what transformers takes."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype or "auto"
    if dtype not in DTYPES:
        raise DotsError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return "auto" if dtype == "auto" else getattr(torch, DTYPES[dtype])


class HFEngine:
    """Engine protocol on transformers (see dots.engines.base.Engine)."""

    def __init__(self, model: str | Path, options: EngineOptions | None = None, task_vectors: Any = None):
        """An engine on `model` (a checkpoint directory) with `options` (checked when made; the
        transformers engine reads device, dtype, batch sizes, seed, synth_cache, resident_form)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        options = options or EngineOptions()
        self.options = options
        self.model_path = Checkpoint(model).path  # validates the directory (DotsError)
        device = options.device
        self.device = (
            torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        self.batch_size = options.batch_size
        self.nll_batch_size = options.nll_batch_size
        self.seed = seed = options.seed
        self.task_vectors = task_vectors
        self.synth_cache = options.synth_cache
        self.resident_form = options.resident_form
        self._resident: ResidentSynthesizer | None = None
        self.swap_path = "fast"  # "public": every swap through load_state_dict (dots.engines.canary)
        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        loaded: Any = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=resolve_dtype(options.dtype))
        self.model = loaded.to(self.device)  # (Any: transformers types `to` as @wraps(Module.to))
        self.model.eval()
        self._targets = dict(self.model.named_parameters(remove_duplicate=False))
        self._targets.update({k: v for k, v in self.model.state_dict(keep_vars=True).items() if k not in self._targets})
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self._eos = sorted(eos_ids)
        self.set_task_vectors(task_vectors)

    # --- inference ------------------------------------------------------------------------
    def _generation_config(self, sampling: Sampling):
        from transformers import GenerationConfig

        greedy = sampling.greedy
        cfg = GenerationConfig(
            max_new_tokens=int(sampling.max_tokens),
            do_sample=not greedy,
            num_return_sequences=1 if greedy else sampling.n,
            eos_token_id=self._eos or None,
            pad_token_id=self.tokenizer.pad_token_id,
            top_k=None,
            repetition_penalty=1.0,
            use_cache=True,
            bos_token_id=self.model.generation_config.bos_token_id,
        )
        if not greedy:
            cfg.temperature = float(sampling.temperature)
            cfg.top_p = float(sampling.top_p)
        return cfg

    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], sampling: Sampling = Sampling()) -> list[list[str]]:
        """n completions per prompt; temperature 0 is greedy (its n copies are identical)."""
        n, greedy = sampling.n, sampling.greedy
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        cfg = self._generation_config(sampling)
        per_batch = self.batch_size if greedy else max(1, self.batch_size // n)
        results: list[list[str]] = []
        for start in range(0, len(prompts), per_batch):
            batch = list(prompts[start : start + per_batch])
            enc = self.tokenizer(batch, return_tensors="pt", padding=True, padding_side="left").to(self.device)
            out = self.model.generate(**enc, generation_config=cfg)
            new = out[:, enc["input_ids"].shape[1] :]
            texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            k = 1 if greedy else n
            for i in range(len(batch)):
                samples = texts[i * k : (i + 1) * k]
                results.append(samples * n if greedy else samples)
        return results

    @torch.inference_mode()
    def prompt_nll(self, texts: Sequence[str]) -> list[PromptNLL]:
        """Σ −log p(token_t | tokens_<t) over each text's tokens but the first, and their count."""
        results: list[PromptNLL] = []
        for start in range(0, len(texts), self.nll_batch_size):
            batch = list(texts[start : start + self.nll_batch_size])
            enc = self.tokenizer(batch, return_tensors="pt", padding=True, padding_side="right").to(self.device)
            ids, mask = enc["input_ids"], enc["attention_mask"]
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            keep = mask[:, 1:].bool()
            nll = -(logp * keep).sum(dim=1)
            for row in range(len(batch)):
                results.append(PromptNLL(float(nll[row]), int(keep[row].sum())))
            del logits, logp
        return results

    # --- weights --------------------------------------------------------------------------
    @torch.no_grad()
    def swap_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (name, tensor) pairs into the live parameters; names in checkpoint naming.

        A subset of the tensors is fine (the others keep their values). A bad name or shape
        raises DotsError; tensors copied before it stay copied.
        """
        if self.swap_path == "public":
            return self._load_public(weights)
        broken = broken_swap()  # tests only: a swap broken on purpose, which the canary must catch
        for name, tensor in weights:
            target = self._targets.get(name)
            if target is None:
                raise DotsError(f"swap: {name!r} is not a tensor of the live model {self.model_path}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise DotsError(f"swap: {name} has shape {tuple(tensor.shape)}, the live model {tuple(target.shape)}")
            with torch.profiler.record_function("dots.hf.copy"):
                (target.clone() if broken == "copy-params" else target).copy_(tensor)

    @torch.no_grad()
    def _load_public(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The public loading path: each tensor through the model's own `load_state_dict`."""
        for name, tensor in weights:
            if name not in self._targets:
                raise DotsError(f"swap: {name!r} is not a tensor of the live model {self.model_path}")
            result = self.model.load_state_dict({name: tensor}, strict=False)
            if result.unexpected_keys:
                raise DotsError(f"swap: the model did not load {name!r}")

    def swap_coefficients_public(self, coefficients: Coefficients) -> None:
        """θ0 + Σ λ_i τ̃_i through the public loading path (the swap canary compares the two)."""
        from dots.vectors.synth import synthesize

        self._load_public(synthesize(self.task_vectors, coefficients, device=self.device))

    def use_public_path(self) -> None:
        """Every later swap through `load_state_dict` (a failed canary's fallback)."""
        self.swap_path = "public"

    def swap_checkpoint(self, path: str | Path) -> None:
        """Load a saved model of the same architecture and shapes into the live one."""
        ckpt = Checkpoint(path)
        params = {n for n, _ in self.model.named_parameters()}
        check_swappable(ckpt, {n: t.shape for n, t in self._targets.items()}, sorted(params))
        self.swap_weights(ckpt.tensors())

    def set_task_vectors(self, task_vectors, synth_cache: str | None = None, resident_form: str | None = None) -> None:
        """Use this τ̃ cache for swap_coefficients (held in memory with synth_cache "memory", or
        "auto" when it fits in the device's free memory now; in `resident_form`, or with "auto"
        the fastest form that fits)."""
        if synth_cache is not None or resident_form is not None:  # checked as the options are
            self.options = self.options.with_(
                synth_cache=synth_cache or self.synth_cache, resident_form=resident_form or self.resident_form
            )
            self.synth_cache, self.resident_form = self.options.synth_cache, self.options.resident_form
        self.task_vectors, self._resident = task_vectors, None
        gc.collect()  # a previous resident copy goes before the new one is measured / loaded
        from dots.vectors.residency import resolve_resident

        cache, form = resolve_resident(self.synth_cache, self.resident_form, task_vectors, self.device)
        if cache == "memory":
            from dots.vectors.synth import ResidentSynthesizer

            held = form if form != "auto" else "bitmask"
            self._resident = ResidentSynthesizer(task_vectors, device=self.device, form=held)
            if self._resident.fused["fused"]:  # its compilation is part of this start (#38)
                print(
                    f"swap: fused pass compiled and checked in {self._resident.fused['compile_s']:.1f} s ({held} form)"
                )

    def resident_info(self) -> dict:
        """What the engine holds for swaps: the resident form (None: τ̃ read from the cache), bytes,
        whether swaps take the fused pass and the seconds its compilation added to the start."""
        if self._resident is None:
            return {"form": None, "nbytes": 0, "fused": False, "compile_s": 0.0}
        return {"form": self._resident.form, "nbytes": self._resident.nbytes, **self._resident.fused}

    @torch.no_grad()
    def swap_coefficients(self, coefficients: Coefficients) -> None:
        """θ0 + Σ λ_i τ̃_i built on the model's device from the task-vector cache; with τ̃ resident,
        written straight into the live parameters of the checkpoint's dtype."""
        if self.task_vectors is None:
            raise DotsError("this engine was created without task vectors; swap_coefficients needs them")
        from dots.vectors.synth import synthesize

        if self._resident is not None:
            # the public path and a swap broken on purpose (tests) go through swap_weights
            direct = self.swap_path == "fast" and broken_swap() is None
            self.swap_weights(self._resident(coefficients, into=self._targets if direct else None))
        else:
            self.swap_weights(synthesize(self.task_vectors, coefficients, device=self.device))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the live weights (tests, debugging)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]
        self._targets = {}
        self._resident = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __enter__(self) -> HFEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
