"""The harness every benchmark shares, so that each measures the same way.

- `checkpoints`: generated Qwen2/Llama-shaped trios (base, sft, rlvr), streamed tensor by tensor;
- `tokenizer`: a character-level tokenizer padded to a model's vocabulary;
- `trio`: benchmarks/harness/generate.py run in a process of its own;
- `timing`: medians of timed runs after untimed warm-ups, each timed until the device has finished
  (`dots.runtime.timing.DeviceTimer`), and GNU `time -v` read back;
- `memory`: process memory (RSS, VmHWM) and a guard that stops a command before the OOM killer;
- `floors`: this machine's memory and disk rates, and the memory-traffic floor of a pass;
- `results`: Markdown sections appended to benchmarks/RESULTS.md, JSON written, the machine named.

Benchmarks import it as `benchmarks.harness` (run them as `python -m benchmarks.<question>` from the
checkout; `entry` is that door, and puts the checkout on PYTHONPATH for the processes they start).
"""
