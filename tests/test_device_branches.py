"""The branches dots takes only on a GPU, run on a CPU (#49): `torch.cuda`'s entry points replaced
by stand-ins that record what was called, a device whose queued work is done only once something
waits for it, and a clock that moves only with that work, so a timer or a check that forgets the
wait, or compares values where it must compare bytes, fails here.

What only a real GPU reaches (Triton kernels from inductor, CUDA's own reduction order, the real
`torch.cuda.synchronize`) runs in `bash benchmarks/gpu/check.sh --fused`: tests/test_fused.py's and
tests/test_timing.py's CUDA cases, tests/test_canary.py on CUDA, and `python -m benchmarks.swap fused`."""

from __future__ import annotations

import logging
import sys
import types
from functools import partial

import numpy as np
import pytest
import torch

import dots.runtime.timing as timing
import dots.vectors.fused as fused_mod
from dots.errors import DotsError
from dots.runtime import devices
from dots.vectors.compact import CompactTensor
from dots.vectors.forms import DenseTau
from dots.vectors.fused import FusedCombine, block_pass, fused_wanted, keep_if_faster, popcount, prepare
from dots.vectors.residency import free_bytes
from dots.vectors.synth import combine_into, new_scratch


class Clock:
    """`time.perf_counter` for the timers: moves only when host work or device work is done."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Queue:
    """A stand-in accelerator on `clock`: `launch(s)` queues s seconds of work and returns at
    once; the work is done (the clock moves) when something waits for the device."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.pending, self.waits = clock, 0.0, 0

    def launch(self, seconds: float) -> None:
        self.pending += seconds

    def synchronize(self, *device: object) -> None:
        self.waits += 1
        self.clock.now += self.pending
        self.pending = 0.0


@pytest.fixture
def cuda(monkeypatch):
    """`torch.cuda.synchronize` replaced by a stand-in queue on a stand-in clock; (queue, calls)."""
    clock = Clock()
    queue = Queue(clock)
    calls: list[object] = []
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device) or queue.synchronize())
    return queue, calls


def test_the_cuda_waiter_waits_for_that_device(cuda):
    queue, calls = cuda
    timing.waiter(torch.device("cuda", 1))()
    timing.wait_for("cuda:0")
    assert calls == [torch.device("cuda", 1), torch.device("cuda", 0)]
    with timing.DeviceTimer("cuda") as timer:  # waits at both ends
        queue.launch(2.5)
    assert len(calls) == 4 and timer.seconds == 2.5


def test_another_accelerator_waits_on_its_own_module(monkeypatch):
    called = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: called.append("mps"))
    timing.waiter("mps")()
    assert called == ["mps"]


def test_the_race_counts_the_work_queued_on_the_device_not_the_launch(cuda):
    """A pass that queues 3 s of device work and returns at once against one doing 1 s on the
    host: measured until the device is done, the queued one is the slower; its warm-up run
    (here 50 s: compiling) is not timed."""
    queue, calls = cuda
    runs = []

    def queued() -> None:
        queue.launch(50.0 if not runs else 3.0)
        runs.append(1)

    def host() -> None:
        queue.clock.now += 1.0

    assert timing.race(queued, host, "cuda", rounds=2) == (3.0, 1.0)
    assert len(runs) == 3 and len(calls) == 2 * 2 * 3
    runs.clear()
    timing.race(queued, host, "cuda")  # three timed rounds by default, after one untimed
    assert len(runs) == 4


def test_what_cuda_has_free_counts_what_torch_holds_unused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1000, 5000))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 300)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 120)
    assert free_bytes(torch.device("cuda", 0)) == 1000 + 300 - 120


def test_the_gpus_memory_is_the_smallest_of_the_group(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    asked = []
    monkeypatch.setattr(devices, "_nvml_memory", lambda count: asked.append(count))  # torch measures
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: [(700, 900), (500, 800)][i])
    assert devices.device_memory("cuda", 2) == devices.DeviceMemory(500, 800, "measured on 2 GPU(s)")
    assert devices.device_memory("cuda").free == 700  # one GPU unless told
    with pytest.raises(DotsError, match="needs 3 GPU"):
        devices.device_memory("cuda", 3)
    assert asked == [2, 1]  # NVML asked first, for as many GPUs as the engine needs


def test_the_hosts_memory_is_what_meminfo_says_is_available(monkeypatch):
    monkeypatch.setattr(devices, "meminfo", lambda: {"MemTotal": 5000, "MemAvailable": 3000, "MemFree": 1})
    assert devices.device_memory("cpu") == devices.DeviceMemory(3000, 5000, "measured (host MemAvailable)")
    monkeypatch.setattr(devices, "meminfo", lambda: {})
    assert devices.device_memory("cpu") == devices.DeviceMemory(0, 0, "measured (host MemAvailable)")


def test_nvml_reads_the_visible_gpus_by_their_physical_index(monkeypatch):
    """NVML numbers every GPU of the machine; CUDA_VISIBLE_DEVICES=3,5 makes GPU 0 of torch NVML's 3."""
    handles = []

    def handle(i):
        handles.append(i)
        return i

    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(free=100 * h, total=1000 + h),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6")
    assert devices._nvml_memory(2) == [(300, 1003), (500, 1005)] and handles == [3, 5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-uuid")  # not indices: torch's order is NVML's
    assert devices._nvml_memory(2) == [(0, 1000), (100, 1001)]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert devices._nvml_memory(1) == [(0, 1000)]

    def broken(h):
        raise RuntimeError("NVML_ERROR_UNINITIALIZED")

    monkeypatch.setattr(nvml, "nvmlDeviceGetMemoryInfo", broken)
    assert devices._nvml_memory(1) is None  # torch measures instead


# ---- the fused pass: its checks and its choice, without compiling (the compiled pass: test_fused)


def bf16(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)


def raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def eager(device: str = "cpu") -> FusedCombine:
    """The fused pass with `block_pass` run as written (no compile: seconds instead of minutes)."""
    fc = FusedCombine(torch.device(device))
    fc._compiled = block_pass
    return fc


def test_popcount_counts_the_bits_of_every_byte():
    x = torch.arange(256, dtype=torch.int32)
    assert popcount(x).tolist() == [bin(i).count("1") for i in range(256)]


def test_the_bitmask_pass_finds_each_kept_value_in_every_block():
    """θ0 = 0 and λ = 1, so each output entry is its τ̃ entry exactly: every kept value lands on
    its own position, blocks of 16 entries over 100 (the last byte half used), blocks that open
    and close on dropped entries; the same bytes as streaming."""
    n = 100
    keep = np.array([(i * 7) % 5 < 3 for i in range(n)])
    values = bf16([0.5 + i for i in range(int(keep.sum()))])
    ct = CompactTensor((n,), "bitmask", values, torch.from_numpy(np.packbits(keep, bitorder="little")))
    theta0 = torch.zeros(n, dtype=torch.bfloat16)
    want = torch.zeros(n, dtype=torch.bfloat16)
    want[torch.from_numpy(np.flatnonzero(keep))] = values
    fc = eager()
    for _ in range(2):  # the checked first use, then the pass alone
        out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
        assert fc.run(out, theta0, [(ct, 1.0)], 16, partial(out.copy_, want))
        assert torch.equal(raw(out), raw(want)) and fc.enabled
    # kept where i % 5 is 0, 1 or 3: 3 per 5 entries, so before entry k: 3·(k // 5) + those of k % 5
    assert fc._bounds_of(ct, 16) == [0, 10, 20, 29, 39, 48, 58, 60]


def dense_case(n: int = 40) -> tuple[torch.Tensor, list[tuple[DenseTau, float]], torch.Tensor]:
    """θ0 with zeros, τ̃ zero there: the streaming path writes +0.0 at those entries."""
    theta0 = bf16([0.0 if i % 4 == 0 else 0.25 * i for i in range(n)])
    data = torch.tensor([0.0 if i % 4 == 0 else 0.125 for i in range(n)])
    return theta0, [(DenseTau((n,), data), 1.0)], new_scratch(torch.device("cpu"), n)


def test_a_pass_writing_negative_zeros_is_turned_off():
    """−0.0 where streaming writes +0.0: equal as values, not as bytes; the check compares bytes."""
    theta0, taus, scratch = dense_case()
    fc = eager()
    original = fc._pass

    def negative_zeros(out, *args):
        original(out, *args)
        out[out == 0] = -0.0

    fc._pass = negative_zeros
    out = torch.empty_like(theta0)
    combine_into(out, theta0, taus, scratch, fc)
    assert not fc.enabled  # turned off
    streamed = combine_into(torch.empty_like(theta0), theta0, taus, scratch)
    assert torch.equal(raw(out), raw(streamed)) and not torch.signbit(out[::4]).any()


def test_the_fused_pass_is_tried_on_cuda_in_every_form_and_on_the_cpu_only_dense_and_large():
    for form in ("dense", "sparse", "index", "bitmask"):
        assert fused_wanted(torch.device("cuda"), form, 10)
        assert not fused_wanted(torch.device("cpu"), form, fused_mod.CPU_MIN_ENTRIES - 1)
    assert fused_wanted(torch.device("cpu"), "dense", fused_mod.CPU_MIN_ENTRIES)
    assert not fused_wanted(torch.device("cpu"), "bitmask", fused_mod.CPU_MIN_ENTRIES)


@pytest.mark.parametrize(("seconds", "kept"), [((2.0, 1.0), False), ((1.0, 1.0), True), ((0.5, 1.0), True)])
def test_the_fused_pass_stays_on_only_where_it_is_not_slower(monkeypatch, caplog, seconds, kept):
    """The race at start: both paths on the largest parameter with every source (the streaming
    one without the fused pass); the slower fused pass is turned off, a tie keeps it."""
    small, taus, scratch = dense_case(8)
    large, large_taus, scratch = dense_case(40)
    raced, passes = [], []
    fc = eager()
    original = fc._pass
    fc._pass = lambda out, theta0, *a: passes.append(theta0.numel()) or original(out, theta0, *a)

    def race(fast, slow, device):
        passes.clear()
        fast()
        raced.append((list(passes), device))
        passes.clear()
        slow()
        raced.append((list(passes), device))
        return seconds

    monkeypatch.setattr(fused_mod, "race", race)
    combine = partial(combine_into, scratch=scratch)
    params = [(small, [taus[0][0]]), (large, [large_taus[0][0], None])]
    with caplog.at_level(logging.INFO, logger="dots.vectors.fused"):
        keep_if_faster(fc, params, combine)
    assert raced == [([40], fc.device), ([], fc.device)] and fc.raced == seconds and fc.enabled is kept
    said = "the fused swap is slower than streaming here (2.0000 s against 1.0000 s): swaps stream"
    assert [r.getMessage() for r in caplog.records] == ([] if kept else [said])


def test_the_race_gives_each_source_its_warm_lambda_and_needs_a_parameter_and_a_source(monkeypatch):
    """Five sources take λ = WARM_LAMBDAS[i mod 4]; no parameter, or no source with an entry for
    the largest one: no race, the fused pass stays as it is."""
    monkeypatch.setattr(fused_mod, "race", lambda fast, slow, device: fast() or (1.0, 2.0))
    seen = []
    fc = eager()
    taus = [object() for _ in range(5)]
    keep_if_faster(fc, [(torch.zeros(3), taus)], lambda out, theta0, picked, fused: seen.append(picked))
    assert seen == [[(tau, fused_mod.WARM_LAMBDAS[i % 4]) for i, tau in enumerate(taus)]]
    assert fc.raced == (1.0, 2.0) and fc.enabled
    fc = eager()
    for params in ([], [(torch.zeros(3), [None, None])]):
        keep_if_faster(fc, params, lambda *a, **k: seen.append("raced"))
    assert len(seen) == 1 and fc.raced is None


def test_prepare_races_only_when_the_choice_is_its_own(monkeypatch):
    """`fused=None` (the default): compiled, checked, raced; `fused=True` (benchmarks, tests):
    compiled and checked, kept on whatever the times."""
    theta0, taus, scratch = dense_case()
    raced = []
    monkeypatch.setattr(fused_mod, "race", lambda *a: raced.append(1) or (2.0, 1.0))
    monkeypatch.setattr(fused_mod, "fused_wanted", lambda device, form, entries: True)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    combine = partial(combine_into, scratch=scratch)
    params = [(theta0, [taus[0][0]])]
    forced = prepare(torch.device("cpu"), "dense", params, combine, True)
    assert forced is not None and forced.enabled and not raced
    chosen = prepare(torch.device("cpu"), "dense", params, combine)
    assert chosen is not None and raced == [1] and not chosen.enabled
    assert prepare(torch.device("cpu"), "dense", params, combine, False) is None
