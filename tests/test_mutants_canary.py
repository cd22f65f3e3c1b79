"""The swap canary (`dots.engines.canary`) in process, on an engine whose NLL is a known function of
its weights: test_canary.py runs it through the CLI, in subprocesses mutmut cannot see
(docs/testing.md). Each engine below breaks one thing a real swap can get wrong; every expected
number is worked out by hand from `FakeEngine`'s NLLs."""

from __future__ import annotations

import pytest
import yaml

import dots.engines.canary as canary_mod
import dots.engines.vllm.compat
from dots.engines.canary import (
    CPU_TOLERANCE,
    CUDA_TOLERANCE,
    PROMPTS,
    Canary,
    broken_swap,
    checked,
    nll_gap,
    read_canary,
    run_canary,
    summary,
    tolerance_for,
)
from dots.errors import DotsError
from dots.scoring.perplexity import PromptNLL

SOURCES = ["sft", "rlvr"]
# prompt i's NLL is BASE[i] + SLOPE[i]·w, w the engine's effective Σλ; TOKENS[i] tokens
BASE, SLOPE, TOKENS = (30.0, 40.0, 20.0), (2.0, -4.0, 1.0), (10, 16, 8)
AT_ZERO = "λ=0 differs from the freshly loaded θ0 by {} nats/token"
UNCHANGED = "λ=0.5 leaves the log-probs of θ0 unchanged: the swap does not reach the model"
PUBLIC_DIFFERS = "λ=0.5 through the public loading path differs from the fast one by {} nats/token"


class FakeEngine:
    """The fast swap sets w = scale·Σλ + residue (reaches=False: w stays), the public one w = Σλ
    (public_scale·Σλ when that path is broken too); `calls` records (path, coefficients)."""

    def __init__(self, *, scale=1.0, residue=0.0, reaches=True, public_scale=1.0, device="cpu", path="fast"):
        self.scale, self.residue, self.reaches, self.public_scale = scale, residue, reaches, public_scale
        self.device = device
        self.swap_path = path
        self.w = 0.0
        self.calls: list[tuple[str, dict]] = []
        self.closed = False

    def prompt_nll(self, texts):
        assert list(texts) == list(PROMPTS)
        return [PromptNLL(nll=b + s * self.w, tokens=n) for b, s, n in zip(BASE, SLOPE, TOKENS)]

    def swap_coefficients(self, coefficients):
        if self.swap_path == "public":
            return self.swap_coefficients_public(coefficients)
        self.calls.append(("fast", dict(coefficients)))
        if self.reaches:
            self.w = self.scale * sum(coefficients.values()) + self.residue

    def swap_coefficients_public(self, coefficients):
        self.calls.append(("public", dict(coefficients)))
        self.w = self.public_scale * sum(coefficients.values())

    def use_public_path(self):
        self.swap_path = "public"

    def close(self):
        self.closed = True


ZERO, HALF = {"sft": 0.0, "rlvr": 0.0}, {"sft": 0.5, "rlvr": 0.5}


def test_the_break_tests_ask_for_is_read_and_checked(monkeypatch):
    monkeypatch.delenv("DOTS_BREAK_SWAP", raising=False)
    assert broken_swap() is None
    monkeypatch.setenv("DOTS_BREAK_SWAP", "")
    assert broken_swap() is None
    for value in ("copy-params", "skip-repack"):
        monkeypatch.setenv("DOTS_BREAK_SWAP", value)
        assert broken_swap() == value
    monkeypatch.setenv("DOTS_BREAK_SWAP", "copy")
    with pytest.raises(DotsError) as err:
        broken_swap()
    assert str(err.value) == "DOTS_BREAK_SWAP must be one of ('copy-params', 'skip-repack'), got 'copy'"


def test_the_tolerance_is_zero_on_the_cpu_and_the_cuda_one_elsewhere(monkeypatch):
    assert CPU_TOLERANCE == 0.0 and CUDA_TOLERANCE == 1e-3
    assert tolerance_for(FakeEngine(device="cpu")) == 0.0
    assert tolerance_for(FakeEngine(device="cuda:0")) == 1e-3
    vllm = FakeEngine()
    del vllm.device  # vLLM: no device attribute, its platform decides
    for cpu, expected in ((True, 0.0), (False, 1e-3)):
        monkeypatch.setattr(dots.engines.vllm.compat, "on_cpu_platform", lambda cpu=cpu: cpu)
        assert tolerance_for(vllm) == expected


def test_the_gap_is_the_largest_difference_per_token():
    assert nll_gap([(31.0, 10), (38.0, 16)], [(30.0, 10), (40.0, 16)]) == 0.125  # 0.1 and 0.125
    assert nll_gap([(3.0, 0)], [(1.0, 0)]) == 2.0  # no tokens: per one token
    assert nll_gap([(1.0, 4), (1.0, 4)], [(1.0, 4), (1.0, 5)]) == float("inf")  # other tokens
    assert nll_gap([], []) == 0.0


def test_a_verdict_reads_as_one_line():
    assert Canary("passed", "fast", 2.94, 0.0, "E").line() == "swap canary: passed, path fast, 2.9 s"
    fell = Canary("fell back", "public", 1.0, 0.0, "E", ["first", "second"])
    assert fell.line() == "swap canary: fell back, path public, 1.0 s: first"


def clock(monkeypatch, *times: float) -> None:
    """time.perf_counter as the canary sees it: these values, in order."""
    values = iter(times)
    monkeypatch.setattr(canary_mod.time, "perf_counter", lambda: next(values))


def test_a_sound_swap_passes_on_the_fast_path_and_is_written(tmp_path, monkeypatch, capsys):
    clock(monkeypatch, 100.0, 102.3456)
    engine = FakeEngine()
    canary = run_canary(engine, SOURCES, tmp_path)
    assert canary == Canary("passed", "fast", 2.346, 0.0, "FakeEngine", [], [30.0, 40.0, 20.0])
    # checks 1-3, then θ0 again
    assert engine.calls == [("fast", ZERO), ("fast", HALF), ("public", HALF), ("fast", ZERO)]
    assert engine.w == 0.0 and engine.swap_path == "fast"
    assert capsys.readouterr().out == "swap canary: passed, path fast, 2.3 s\n"
    written = (tmp_path / "canary.yaml").read_text()
    assert list(yaml.safe_load(written)) == [
        "verdict",
        "path",
        "seconds",
        "tolerance",
        "engine",
        "failures",
        "nll_fresh",
    ]
    assert read_canary(tmp_path) == {
        "verdict": "passed",
        "path": "fast",
        "seconds": 2.346,
        "tolerance": 0.0,
        "engine": "FakeEngine",
        "failures": [],
        "nll_fresh": [30.0, 40.0, 20.0],
    }
    assert summary(read_canary(tmp_path)) == "passed (fast path, 2.3 s)"


def test_without_a_run_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_canary(FakeEngine(), SOURCES).verdict == "passed"
    assert list(tmp_path.iterdir()) == []


def test_a_fast_swap_with_wrong_values_falls_back_to_the_public_path(tmp_path, capsys):
    """λ 1.5 times too large: checks 1 and 2 pass, check 3 sees w 1.5 for 1: gaps 0.1, 0.125,
    0.0625 per token. On the public path every check passes."""
    engine = FakeEngine(scale=1.5)
    canary = run_canary(engine, SOURCES, tmp_path)
    assert canary.verdict == "fell back" and canary.path == "public" and engine.swap_path == "public"
    assert canary.failures == [PUBLIC_DIFFERS.format("0.125")]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"swap canary: the fast swap failed ({canary.failures[0]}); switching to the public loading path"
    assert out[1].startswith("swap canary: fell back, path public, ") and out[1].endswith(f": {canary.failures[0]}")
    assert engine.calls[4:] == [("public", ZERO), ("public", HALF), ("public", HALF), ("public", ZERO)]
    assert read_canary(tmp_path)["verdict"] == "fell back"


def test_a_swap_leaving_a_residue_at_zero_is_caught_by_the_first_check():
    """w = Σλ + 0.5: at λ = 0 the gaps are 0.1, 0.125, 0.0625 (check 1) and so are those of
    check 3 (1.5 for 1)."""
    canary = run_canary(FakeEngine(residue=0.5), SOURCES)
    assert canary.failures == [AT_ZERO.format("0.125"), PUBLIC_DIFFERS.format("0.125")]
    assert canary.verdict == "fell back"


def test_a_swap_that_does_not_reach_the_model_is_caught_by_the_second_check():
    """w stays 0: check 2 sees θ0's NLL exactly (gap 0 ≤ 0), check 3 the public path's w = 1 (gaps
    0.2, 0.25, 0.125)."""
    canary = run_canary(FakeEngine(reaches=False), SOURCES)
    assert canary.failures == [UNCHANGED, PUBLIC_DIFFERS.format("0.25")]
    assert canary.verdict == "fell back"


def test_a_gap_within_the_tolerance_passes_and_a_change_within_it_does_not_count():
    """On a GPU (1e-3 nats/token): a residue of 0.002 (gaps 0.0004, 0.0005, 0.00025) passes checks 1
    and 3; a fast swap moving the NLL by that little does not reach the model."""
    assert run_canary(FakeEngine(device="cuda", residue=0.002), SOURCES).verdict == "passed"
    tiny = run_canary(FakeEngine(device="cuda", scale=0.002), SOURCES)
    assert tiny.failures[0] == UNCHANGED and tiny.verdict == "fell back"


def test_when_the_public_path_fails_too_the_run_stops(tmp_path, capsys):
    """Neither path moves the model: check 2 fails on the fast path, and again on the public one."""
    broken = FakeEngine(reaches=False, public_scale=0.0)
    with pytest.raises(DotsError) as err:
        run_canary(broken, SOURCES, tmp_path)
    assert broken.swap_path == "public"
    assert read_canary(tmp_path)["failures"] == [UNCHANGED, UNCHANGED]
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("swap canary: failed, path public, ") and line.endswith(f": {UNCHANGED}")
    assert str(err.value) == f"{line}; weight swaps do not reach the model on this engine: see dots.doctor"


def test_an_engine_already_on_the_public_path_fails_without_switching(tmp_path, capsys):
    engine = FakeEngine(path="public", public_scale=0.0)
    with pytest.raises(DotsError):
        run_canary(engine, SOURCES, tmp_path)
    assert read_canary(tmp_path)["failures"] == [UNCHANGED] and read_canary(tmp_path)["path"] == "public"
    assert "switching" not in capsys.readouterr().out
    assert len(engine.calls) == 4


def test_checked_returns_the_engine_or_closes_it(tmp_path):
    sound = FakeEngine()
    assert checked(sound, SOURCES, tmp_path) is sound and not sound.closed
    broken = FakeEngine(reaches=False, public_scale=0.0)
    with pytest.raises(DotsError):
        checked(broken, SOURCES, tmp_path)
    assert broken.closed

    class Interrupted(FakeEngine):
        def prompt_nll(self, texts):
            raise KeyboardInterrupt

    stopped = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        checked(stopped, SOURCES, None)
    assert stopped.closed


def test_no_canary_reads_as_none(tmp_path):
    assert read_canary(tmp_path) is None
    (tmp_path / "canary.yaml").mkdir()  # not a file
    assert read_canary(tmp_path) is None
    assert summary(None) is None and summary({}) is None
    assert summary({"verdict": "fell back", "path": "public", "seconds": "0.25"}) == "fell back (public path, 0.2 s)"
