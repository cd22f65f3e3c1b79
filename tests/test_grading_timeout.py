"""Equivalence never hangs: each comparison has a time limit, enforced in a helper
process (dots/scoring/worker.py). sympy runs for minutes on adversarial LaTeX such as
9^{9^{9^{9}}}. These tests assert what happened — the limit fired (the helper's alarm, or the
caller's hard deadline killing it) and the answer was judged not equivalent — never seconds;
the timings are in benchmarks/grading/peers.py."""

import threading

from dots.scoring import answers_equivalent, consistency, is_correct
from dots.scoring.equivalence import helper
from dots.scoring.worker import COMPARE_TIMEOUT_S

ADVERSARIAL = ("9^{9^{9^{9}}}", "9^{9^{9^{8}}}")


def test_adversarial_comparison_stops_at_its_time_limit():
    answers_equivalent("x+1", "1+x")  # the helper is up
    timeouts, kills = helper.timeouts, helper.kills
    assert not answers_equivalent(*ADVERSARIAL)
    assert helper.timeouts == timeouts + 1  # the helper's own alarm stopped it
    assert helper.kills == kills  # without killing the helper
    assert COMPARE_TIMEOUT_S <= 10
    # the next comparison is unaffected
    assert answers_equivalent("\\frac{x^2-1}{x-1}", "x+1")


def test_adversarial_completion_in_a_consistency_batch():
    timeouts = helper.timeouts
    outs = ["\\boxed{(10^{9})!}", "\\boxed{x+1}", "\\boxed{1+x}", "\\boxed{2^{2^{32}} \\cdot 3}"]
    assert consistency(outs) == 0.5
    assert not is_correct("\\boxed{\\binom{10^{9}}{5 \\cdot 10^{8}}}", "1")
    assert helper.timeouts > timeouts  # the adversarial ones were stopped by the limit, judged unequal


def test_hard_deadline_kills_a_stuck_helper_and_restarts_it():
    kills, timeouts = helper.kills, helper.timeouts
    # no soft alarm (timeout 0): only the caller's hard deadline can stop this one
    assert helper.equal("(10^{9})!", "2", timeout=0, hard_timeout=3) is False
    assert helper.kills == kills + 1 and helper.timeouts == timeouts
    assert helper.equal("x+2", "2+x") is True  # a fresh helper


def test_adversarial_input_off_the_main_thread():
    result = {}

    def work():
        result["eq"] = answers_equivalent(*ADVERSARIAL)
        result["ok"] = answers_equivalent("[0,1)", "[0, 1)")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    assert result == {"eq": False, "ok": True}


def test_a_forked_child_gets_its_own_helper():
    import multiprocessing

    assert answers_equivalent("x+3", "3+x")  # the parent's helper is running
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply(answers_equivalent, ("x+4", "4+x")) is True
    assert answers_equivalent("x+5", "5+x")  # the parent's helper still answers
