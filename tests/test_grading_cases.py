"""Hand-written completions (tests/grading_cases.py) and the number rules behind them."""

import pytest
from grading_cases import CASES

from dots.scoring import consistency, equivalence_classes, extract_answer, is_correct, majority_answer
from dots.scoring.normalize import shape, to_latex
from dots.scoring.numbers import numbers_equal, read_number


@pytest.mark.parametrize("case", CASES, ids=[f"{c.group}:{c.note}" for c in CASES])
def test_hand_written_case(case):
    assert is_correct(case.completion, case.gold) == case.truth, extract_answer(case.completion)


def test_cases_cover_every_group():
    groups = {c.group for c in CASES}
    assert groups == {"format", "value", "wrong", "policy"}
    assert sum(not c.truth for c in CASES) >= 15


@pytest.mark.parametrize(
    "text,value,exact,percent",
    [
        ("42", 42, True, False),
        ("142.0", 142, True, False),
        ("-0.5", -0.5, False, False),
        ("4.4e7", 44_000_000, False, False),
        ("4.4 \\times 10^{7}", 44_000_000, False, False),
        ("1.45\\cdot10^{-5}", 1.45e-5, False, False),
        ("62.5\\%", 62.5, False, True),
        ("$8 \\%$", 8, True, True),
        ("\\frac{3}{4}", 0.75, True, False),
        ("\\dfrac34", 0.75, True, False),
        ("-1./3", -1 / 3, True, False),
        ("1\\frac{4}{5}", 1.8, True, False),
        ("10,\\!080", 10080, True, False),
        ("\\$18.90", 18.9, False, False),
    ],
)
def test_read_number(text, value, exact, percent):
    n = read_number(text)
    assert n is not None and float(n.value) == pytest.approx(value, rel=1e-12)
    assert (n.exact, n.percent) == (exact, percent)


@pytest.mark.parametrize("text", ["x", "2\\pi", "\\sqrt{2}", "5 \\text{ cm}", "1, 2", "(1,2)", "10^{5}", "1e999999"])
def test_not_a_plain_number(text):
    assert read_number(text) is None


def test_tolerance_rules():
    eq = lambda a, b: numbers_equal(read_number(a), read_number(b))  # noqa: E731
    assert eq("0.5978", "0.59776")  # more digits than the gold: agrees to its precision
    assert eq("\\frac13", "0.333333")
    assert not eq("\\frac13", "0.333")  # relative error 1e-3 > 1e-4
    assert not eq(".35625", ".35626")  # same precision, different last digit
    assert not eq("4.5e33", "4.52e33")
    assert not eq("1e-8", "2e-8")
    assert not eq("3986729", "3986730")  # exact integers: exact comparison
    assert eq("62.5\\%", "0.625") and eq("62.5\\%", "62.5") and not eq("62.5\\%", "6.25")


def test_shapes_and_latex():
    assert shape("\\{1,2\\}") == "set" and shape("\\left( 3, \\frac{\\pi}{2} \\right)") == "tuple"
    assert shape("(1,2), (3,4)") == "other" and shape("1,2") == "other" and shape("(x+1)") == "other"
    assert to_latex("4.4e7") == "4.4\\times10^{7}" and to_latex("62.5%") == "62.5\\%"
    assert to_latex("e^{t} / 3") == "e^{t} / 3"  # Euler's e is left alone


def test_consistency_reads_numbers_as_the_field_does():
    box = lambda s: f"<think>…</think> \\boxed{{{s}}}"  # noqa: E731
    samples = [box("4.4e7"), box("4.4 \\times 10^{7}"), box("44000000"), "<answer>4.4\\cdot10^{7}</answer>", box("5")]
    assert consistency(samples) == pytest.approx(0.8)
    assert equivalence_classes(["50\\%", "50", "0.5", "2"]) == [0, 0, 0, 1]
    # percent equivalence is not transitive: classes follow sample order
    assert equivalence_classes(["50", "0.5", "50\\%"]) == [0, 1, 0]
    assert majority_answer([box("1e-8"), box("2e-8"), box("2 \\times 10^{-8}")]) == "2e-8"


def test_documented_examples():
    """The examples of docs/grading.md and the README's grading section."""
    assert is_correct("<think>…</think> The distance is $\\boxed{4.4 \\times 10^{7}}$ m.", "4.4e7")
    assert is_correct("<think>…</think>\n<answer>62.5\\%</answer>", "62.5%")
    assert not is_correct("<think>…</think> so \\boxed{(2,1)}", "(1,2)")
    completions = ["… \\boxed{\\frac12}", "<answer>0.5</answer>", "The answer is 50\\%.", "… \\boxed{2}", "I give up"]
    answers = [extract_answer(c) for c in completions]
    assert answers == ["\\frac12", "0.5", "50\\%", "2", None]
    assert equivalence_classes(answers) == [0, 0, 0, 1, None]
    assert consistency(completions) == pytest.approx(0.6)
