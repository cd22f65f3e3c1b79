"""Swap timers wait for the device (dots.runtime.timing, #38): proven on the CPU with a stand-in
accelerator whose work completes only after the call that queued it has returned."""

import threading
import time

import torch
from helpers import lab_scorer

import dots.search.study.scorer
from dots.runtime.timing import DeviceTimer, device_of, waiter


class QueuedDevice:
    """A stand-in accelerator: `launch` queues work and returns at once, as a CUDA call does; the
    work runs on another thread once something waits for the device (`synchronize`), and stamps
    (`time.perf_counter`) when the call returned and when the work was done."""

    def __init__(self) -> None:
        self.returned: list[float] = []
        self.done: list[float] = []
        self._go = threading.Event()
        self._workers: list[threading.Thread] = []

    def launch(self) -> None:
        def work() -> None:
            self._go.wait()
            torch.ones(1000).sum()  # the queued work
            self.done.append(time.perf_counter())

        thread = threading.Thread(target=work)
        thread.start()
        self._workers.append(thread)
        self.returned.append(time.perf_counter())

    def synchronize(self) -> None:
        self._go.set()
        for thread in self._workers:
            thread.join()
        self._workers.clear()
        self._go.clear()


def test_the_timer_stops_after_the_device_has_finished():
    device = QueuedDevice()
    with DeviceTimer(device) as timer:
        device.launch()
    assert timer.started <= device.returned[0] < device.done[0] <= timer.stopped
    # without waiting the work is not done when the call returns: a timer stopping there is wrong
    device.launch()
    assert not device.done[1:]
    device.synchronize()
    assert device.returned[1] < device.done[1]


def test_what_waits_for_each_device():
    device = QueuedDevice()
    assert waiter(device) == device.synchronize
    assert waiter("cpu")() is None and waiter(None)() is None  # CPU work is done when the call returns
    assert device_of(object()) is None


def test_the_scorers_swap_time_covers_the_work_the_swap_queued(tmp_path, monkeypatch):
    """The search's real Scorer and transformers engine, the swap also queueing work on the
    stand-in device: `time_swap` ends after that work is done, and the perplexity phase that
    follows no longer carries it."""
    scorer = lab_scorer(tmp_path / "cache", k=1, queries=1)
    device = QueuedDevice()
    entered: list[float] = []
    swap = scorer.engine.swap_coefficients

    def swap_and_queue(coefficients):
        entered.append(time.perf_counter())
        swap(coefficients)
        device.launch()

    monkeypatch.setattr(scorer.engine, "swap_coefficients", swap_and_queue)
    monkeypatch.setattr(dots.search.study.scorer, "device_of", lambda engine: device)
    try:
        result = scorer({"sft": 0.5, "rlvr": 0.5}, seed=0)
    finally:
        scorer.engine.close()
    assert device.returned[0] < device.done[0]
    assert result.times["swap"] >= device.done[0] - entered[0]
