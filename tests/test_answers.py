"""Answer extraction, math-verify equivalence and consistency (docs/method.md §3, §7)."""

import threading

import pytest

from dots.scoring.equivalence import answers_equivalent, equivalence_classes
from dots.scoring.extract import boxed_answers, extract_answer, extract_choice
from dots.scoring.grade import consistency, consistency_of_labels, is_correct, majority_answer

EXTRACTION = [
    # (completion, expected answer)
    ("so the result is \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("nested: \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    ("set: \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
    ("first \\boxed{1} then corrected \\boxed{2}", "2"),  # last box wins
    ("\\boxed{3} and a truncated \\boxed{\\frac{1}{", "3"),  # unclosed box ignored
    ("\\fbox{7}", "7"),
    ("\\boxed 5 is it", "5"),
    ("$\\boxed{ x^2 + 1 }$", "x^2 + 1"),
    ("interval \\boxed{[0, 1)}", "[0, 1)"),
    ("<think>maybe \\boxed{1}</think> final: \\boxed{2}", "2"),
    ("No box. The answer is 17.", "17"),
    ("Therefore, the final answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("Answer: 12\nmore text", "12"),
    ("I am not sure.", None),
    ("", None),
    ("the sum is 3 + 4 = 7", None),  # no last-number fallback by default
    ("\\boxedvalue{3}", None),  # not a box command
    # <answer> tags (official DoTS code, LUFFY/R1-style prompts)
    ("<think>x</think>\n<answer>5</answer>", "5"),
    ("<think>x</think><answer> $\\frac{3}{4}$ </answer>", "\\frac{3}{4}"),
    ("<answer>The area is \\boxed{12}.</answer>", "12"),
    ("<answer>So the answer is 7.</answer>", "7"),
    ("\\boxed{3} then <answer>5</answer>", "5"),  # the tag is the stated final answer
    ("<answer></answer> \\boxed{4}", "4"),  # an empty tag states nothing
    # text fallbacks keep only the answer
    ("The answer is: 3/4.", "3/4"),
    ("the answer is 5, because of symmetry.", "5"),
    ("the answer is 1, 2, and 3.", "1, 2, and 3"),
    ("The answer is (1, 2), since x > 0.", "(1, 2)"),
    ("The answer is 3.5.", "3.5"),
    ("The answer is -5.", "-5"),
    ("The answer is: -\\frac{1}{2}", "-\\frac{1}{2}"),
    ("Final answer:\n\n12", "12"),
    ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}"),
    ("**Final Answer:** **12**", "12"),
    ("The answer is $\\$32,\\!348$.", "\\$32,\\!348"),  # \$ inside a math span
    # the Solution after </think> beats a box drafted while thinking
    ("<think>maybe \\boxed{3}</think> The answer is 5", "5"),
    ("<think>surely \\boxed{3}</think> I am done.", "3"),  # nothing stated after: the thinking's box
    # an empty box is no answer, never the literal markup
    ("\\boxed{} The answer is \\boxed{}.", None),
    ("\\boxed{4} and then \\boxed{}", "4"),
    # an answer of several parts is read whole in every wrapper (OlympiadBench's `$69$,$84$`)
    ("<answer>$69$,$84$</answer>", "69, 84"),
    ("<answer>$\\boxed{69}$, $\\boxed{84}$</answer>", "69, 84"),
    ("So the final answer is $\\boxed{69}$,$\\boxed{84}$.", "69, 84"),
    ("\\boxed{1} and \\boxed{2}", "1, 2"),
    ("The answer is $69$, $84$.", "69, 84"),
    ("The answer is \\(1\\) and \\(2\\).", "1, 2"),
    ("<answer>$f(x)=ax+b$, where $b$ is any integer</answer>", "$f(x)=ax+b$, where $b$ is any integer"),
    ("x = \\boxed{1}, so y = \\boxed{2}", "2"),  # prose between boxes: the last one
    ("The answer is $5$, since $x$ is odd.", "5"),  # a clause after the span is not the answer
    ("<answer>$12$ square units</answer>", "12"),
    ("The answer is \\boxed{}. Hmm, the answer is 6.", "6"),
]


def test_last_number_fallback_is_opt_in():
    assert extract_answer("the sum is 3 + 4 = 7", fallbacks=("answer_is", "last_number")) == "7"
    assert extract_answer("total 1,234 apples", fallbacks=("last_number",)) == "1234"
    with pytest.raises(ValueError):
        extract_answer("x", fallbacks=("bogus",))


def test_boxed_answers_in_order():
    assert boxed_answers("\\boxed{a} x \\boxed{b{c}} \\boxed{") == ["a", "b{c}"]


EQUIVALENT = [
    ("\\frac12", "0.5"),
    ("\\frac{1}{2}", "1/2"),
    ("\\dfrac{3}{4}", "0.75"),
    ("[0,1)", "[0, 1)"),
    ("x+1", "1+x"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"),
    ("10", "10.0"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("3", "x=3"),
    # scientific notation (21% of Minerva's golds)
    ("4.4e7", "4.4 \\times 10^{7}"),
    ("4.4e7", "44000000"),
    ("1.45e-5", "1.45\\cdot10^{-5}"),
    ("2.7778e-6", "2.777778 \\times 10^{-6}"),
    # percentages: p% is p and p/100
    ("10\\%", "10"),
    ("50\\%", "\\frac12"),
    ("62.5%", "62.5\\%"),
    ("17.5%", "0.175"),
    ("$8 \\%$", "8\\%"),
    # exact forms of the golds
    ("142.0", "142"),
    ("025", "25"),
    ("-1./3", "-\\frac{1}{3}"),
    ("10,\\!080", "10080"),
    ("1\\frac{4}{5}", "1.8"),
    ("$69$,$84$", "69, 84"),
    ("np.arcsin(10/13)", "\\arcsin\\left(\\frac{10}{13}\\right)"),
    ("\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}", "\\frac{2}{3} E_{2}+\\frac{1}{3} E_{1}"),
    # deliberate: a ratio is its quotient; a bare list is a set
    ("2:3", "\\frac23"),
    ("1,3", "\\{3,1\\}"),
]
NOT_EQUIVALENT = [
    ("(0,1)", "[0,1]"),  # open vs closed interval
    ("2", "3"),
    ("abc", "abd"),
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("(1,2)", "(2,1)"),  # ordered pair vs its reverse
    ("\\{1,2\\}", "(1,2)"),  # deliberate: a set is not a tuple or interval
    ("\\{1,2\\}", "[1,2]"),
    ("1e-8", "2e-8"),  # math-verify's 6-decimal rounding made these equal
    ("1e-8", "2 \\times 10^{-8}"),
    ("4.5e33", "4.52\\times10^{33}"),  # beyond the gold's precision
    (".35625", ".35626"),
    ("3986729", "3986730"),
    ("\\frac13", "0.333"),
    ("62.5%", "63.5\\%"),
    ("50", "\\frac12"),  # a percent matches both readings; plain numbers do not
    ("\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}", "\\frac{2}{3} E_{1}+\\frac{2}{3} E_{2}"),  # partial parse
]


@pytest.mark.parametrize("a,b", EQUIVALENT)
def test_equivalent_forms(a, b):
    assert answers_equivalent(a, b)


@pytest.mark.parametrize("a,b", NOT_EQUIVALENT)
def test_different_answers(a, b):
    assert not answers_equivalent(a, b)


def test_no_answer_is_never_equivalent():
    assert not answers_equivalent(None, None)
    assert equivalence_classes([None, "1", None, "1.0"]) == [None, 0, None, 0]


CHOICES = [
    ("The answer is (B).", "B"),
    ("\\boxed{C}", "C"),
    ("\\boxed{\\text{D}}", "D"),
    ("\\boxed{(A) 42}", "A"),
    ("Answer: J", "J"),
    ("<think>A or B?</think> The answer is A", "A"),
    ("I think it is a trick question.", None),
    ("B", "B"),
    ("<think>It is B</think>\n<answer>C</answer>", "C"),
    ("<answer>(D) 42</answer>", "D"),
    ("<answer>The answer is (E).</answer>", "E"),
    ("<think>\\boxed{A}</think> The answer is B", "B"),
]


@pytest.mark.parametrize(
    "extract,text,expected",
    [(extract_answer, *case) for case in EXTRACTION] + [(extract_choice, *case) for case in CHOICES],
    ids=lambda value: value.__name__ if callable(value) else None,
)
def test_extraction(extract, text, expected):
    """extract_answer on EXTRACTION's completions, extract_choice on CHOICES'."""
    assert extract(text) == expected


def test_consistency_definition():
    box = lambda s: f"... \\boxed{{{s}}}"  # noqa: E731
    # 3 of 5 agree (0.5, \frac12, 1/2 are one answer), so C = 3/5
    assert consistency([box("0.5"), box("\\frac12"), box("1/2"), box("2"), box("3")]) == pytest.approx(0.6)
    # no-answer samples count in m but never form the majority
    assert consistency(["no idea", "none", "?", box("7"), box("8")]) == pytest.approx(0.2)
    assert consistency(["no idea"] * 4) == 0.0
    assert consistency([box("4")] * 8) == 1.0
    choices = ["The answer is (B)", "\\boxed{B}", "(C)", "answer: C", "Answer: B"]
    assert consistency(choices, mode="choice") == pytest.approx(0.6)
    assert consistency_of_labels([]) == 0.0


def test_majority_and_correctness():
    outs = ["\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{2}"]
    assert majority_answer(outs) == "0.5"
    assert majority_answer(["nothing"]) is None
    assert is_correct("so \\boxed{\\frac{1}{2}}", "0.5")
    assert is_correct("so \\boxed{\\frac{1}{2}}", "\\boxed{\\frac12}")
    assert not is_correct("so \\boxed{3}", "0.5")
    assert not is_correct("no answer", "0.5")
    assert is_correct("The answer is (C)", "C", mode="choice")
    assert not is_correct("The answer is (C)", "D", mode="choice")


def test_scoring_off_the_main_thread():
    """math-verify's SIGALRM timeout fails in threads; scoring there must still be exact."""
    results = {}

    def work():
        results["c"] = consistency(["\\boxed{\\frac12}", "\\boxed{0.5}", "\\boxed{2}"])
        results["eq"] = answers_equivalent("[0,1)", "[0, 1)")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=300)
    assert results == {"c": pytest.approx(2 / 3), "eq": True}
