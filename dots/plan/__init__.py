"""The memory plan of a search: what a run holds on each device beside the live engine, and
whether τ̃ stays resident (`synth_cache: memory`) or is read from the cache at every swap
(`disk`) — decided before the engine starts.

Per device (each GPU of the engine's tensor-parallel group; on CPU the host, shared by
every worker, so the per-worker figures count once per worker):

  engine weights    the model in the engine's dtype, split over tensor parallelism
  KV cache          the engine's minimum share: the k samples of one query at full length
                    (search.k × (PROMPT_TOKENS + max_tokens) tokens; the transformers engine:
                    its batch_size sequences), for vLLM at least one max_model_len sequence
                    (vLLM refuses to start with less); KV heads split over tensor parallelism
  engine reserve    activations, CUDA context and graphs: a fixed allowance (ENGINE_RESERVE)
  τ̃ resident        transformers: θ0 + one output buffer per merged tensor + K compact τ̃ +
                    scratch, what `dots.vectors.synth.ResidentSynthesizer` holds. vLLM: each
                    worker's shard of θ0 and of the K compact τ̃ of the merged tensors (divided
                    by tensor_parallel_size) + one output buffer of the largest such shard + the
                    scratch, what `dots.engines.vllm.resident.ShardedResident` holds: a swap
                    writes into the engine's own parameters (no output copy of the model)
  τ̃ from the cache  one tensor at a time (`dots.vectors.synth.synthesize`): the largest
                    tensor's θ0, output (+ rows a source adds) and K compact τ̃, + scratch

`synth_cache: auto` (the default) keeps τ̃ resident when engine + resident fit, else reads
it from the cache when engine + one tensor fit; a plan where neither fits stops with one
line giving the numbers. `memory` or `disk` given explicitly is checked the same way.
Resident τ̃ is held in one of three forms (`dots.vectors.forms`; `resident_form: auto`, the
default, takes the fastest that fits): dense float32 (4 bytes per parameter and source),
sparse float32 at int32 positions (8·density) or the compact bitmask (1/8 + density·itemsize);
a form given explicitly that does not fit stops with one line. With
vLLM on a GPU and `gpu_memory_utilization: null`, the plan also sets vLLM's share of each
device (vLLM fills its share with KV cache) so that what dots holds beside it fits, at most
vLLM's default 0.9. The compact τ̃ is estimated from the shapes and the density
(`dots.vectors.compact.estimate_bytes`, 1/8 + density·itemsize bytes per parameter), so a
plan needs neither the cache nor the weights — `python -m dots.plan` prints one from a
config.json alone.

An engine given `synth_cache: auto` without a plan (built directly, as a library) resolves
it when it receives its task vectors (`resolve_resident`): resident, in the fastest form
whose actual size fits in what its device has free at that moment.

The package, one module per job: `devices` (what the devices have free), `estimate` (the bytes
each way of holding τ̃ needs), `decide` (the plan and its choice), `render` (the plan as
lines), `resolve` (an engine without a plan); `python -m dots.plan` prints a search's plan.
The plan's view of an engine config and of a search config is `dots.plan.search`.
"""
