"""Answer extraction and grading cases the mutation check found untested (docs/testing.md); each
follows from the docstrings of dots/scoring/extract.py and dots/scoring/grade.py."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from types import SimpleNamespace

import pytest

from dots.errors import DotsError
from dots.scoring.extract import clean_phrase, extract_choice
from dots.scoring.grade import consistency_and_majority, is_correct, majority_answer
from dots.scoring.normalize import normalize, shape, strip_delimiters, to_latex
from dots.scoring.numbers import read_number
from dots.scoring.perplexity import PromptNLL, perplexity
from dots.scoring.prompts import format_prompt, format_prompts
from dots.scoring.sampling import Sampling


def test_a_phrase_that_opens_with_a_box_states_its_content():
    """ "A phrase's answer is the … box it opens with"; an unclosed box there is no answer, even
    when a complete box follows later in the text."""
    assert clean_phrase("\\boxed{5} since the sum is symmetric") == "5"
    assert clean_phrase(": \\boxed{\\frac{3}{4}}.") == "\\frac{3}{4}"
    assert clean_phrase("\\boxed{\\frac{1}{ and then \\boxed{2}") is None


def test_a_bare_option_of_up_to_four_characters_is_the_choice():
    """A completion that is only the option, `(B).` included (four characters), is that letter."""
    assert extract_choice("(B).") == "B"
    assert extract_choice("C") == "C"


def test_thinking_without_a_box_gives_no_choice():
    """The thinking is read only for a box: none there and no letter in the solution → None."""
    assert extract_choice("<think>between A and B, hard to say</think>I cannot decide.") is None
    assert extract_choice("<think>so \\boxed{D}</think>I cannot decide.") == "D"


def test_a_lowercase_gold_letter_is_that_option():
    """`gold` as the benchmark writes it: a lowercase letter is its option (letter_of reads capitals
    only; the gold falls back to its upper case)."""
    assert is_correct("The answer is (B).", "b", mode="choice")
    assert not is_correct("The answer is (C).", "b", mode="choice")
    assert is_correct("The answer is (B).", "(B)", mode="choice")


def test_consistency_and_majority_gives_the_majority_answer():
    """Eq. 4 and a representative answer of the largest answered class; none answered → None."""
    c, answer = consistency_and_majority(["\\boxed{2}", "so \\boxed{3}", "\\boxed{2.0}", "no idea"])
    assert c == 2 / 4 and answer == "2"  # 2 and 2.0 are one class, first seen "2"; m counts all 4
    assert consistency_and_majority(["(B)", "The answer is (B).", "(C)"], mode="choice") == (2 / 3, "B")
    assert consistency_and_majority(["no idea", "none"]) == (0.0, None)


def test_perplexity_means_over_tokens_or_over_texts():
    """tokens: exp(Σ NLL / Σ tokens); queries: exp of the mean of each text's NLL per token, texts
    without a scored token left out; NaN when none has one."""
    nlls = [PromptNLL(1.0, 1), PromptNLL(9.0, 3), PromptNLL(0.0, 0)]
    assert math.isclose(perplexity(nlls), math.exp(10.0 / 4))
    assert math.isclose(perplexity(nlls, "queries"), math.exp((1.0 + 3.0) / 2))
    assert math.isnan(perplexity([PromptNLL(0.0, 0)], "queries")) and math.isnan(perplexity([]))


def test_numbers_in_braces_and_with_latex_thousands_separators():
    """`{,}` is LaTeX's thousands separator and balanced outer braces wrap nothing: the number."""
    assert read_number("1{,}000").value == 1000 and read_number("10{,}080").value == 10080
    assert read_number("{{5}}").value == 5 and read_number("{-\\frac{1}{2}}").value == Fraction(-1, 2)
    assert read_number("{1}{2}") is None  # two groups, not one wrapped number


def test_to_latex_drops_the_dot_of_numpy_style_fractions():
    """numpy-style `-1./3` is `-1/3` for math-verify; a decimal point before digits stays."""
    assert to_latex("-1./3") == "-1/3" and to_latex("2. / 5") == "2 / 5"
    assert to_latex("1.5/3") == "1.5/3"


def test_only_a_closed_bracketed_list_is_a_tuple():
    """`tuple` for a bracketed list `(a, b)` / `[a, b]` (an interval may mix them); unclosed, it is not."""
    assert shape("(1, 2)") == shape("[0, 1)") == "tuple"
    assert shape("(0, X") == shape("[0, 1") == shape("1, 2") == "other"


def test_normalize_ignores_what_the_docstring_says_does_not_matter():
    """`\\%` vs `%`, `^\\circ`, `\\dfrac`, `\\left`/`\\right` and spaces give one canonical string."""
    assert normalize("50\\%") == normalize("50%") == "50%"
    assert normalize("$90^\\circ$") == normalize("90^{\\circ}") == "90"
    assert normalize("\\left( \\dfrac{1}{2}, 3 \\right)") == "(\\frac{1}{2},3)"


def test_strip_delimiters_needs_both_ends_and_keeps_a_decimal_point():
    """`\\(…\\)` / `\\[…\\]` only when they wrap the answer; a final period is dropped, except
    right after a digit, where it may be the number's own point (numpy-style `1.`)."""
    assert strip_delimiters("\\(x+1\\)") == strip_delimiters("\\[x+1\\]") == "x+1"
    assert strip_delimiters("\\(x+1") == "\\(x+1" and strip_delimiters("x+1\\]") == "x+1\\]"
    assert strip_delimiters("$\\pi r$.") == "\\pi r" and strip_delimiters("5.") == "5."


# ---- survivors of the whole-core run (#49, tests/mutation/)


def test_the_majority_is_the_first_seen_among_tied_classes_with_the_fallbacks_given():
    assert majority_answer(["\\boxed{1}", "\\boxed{2}"]) == "1"
    assert majority_answer(["\\boxed{2}", "\\boxed{1}", "\\boxed{1}"]) == "1"
    assert majority_answer(["The answer is 7."]) == "7"  # the default fallbacks read "the answer is"
    assert majority_answer(["The answer is 7."], fallbacks=()) is None


def test_format_prompts_is_format_prompt_for_each_question_with_every_argument():
    assert format_prompts(["q1", "q2"]) == [format_prompt("q1"), format_prompt("q2")]
    assert format_prompts(["q1"])[0] == format_prompt("q1", "dots_think")
    assert "SYSTEM-X" in format_prompts(["q1"], "dots_think", None, "SYSTEM-X")[0]
    chat = SimpleNamespace(
        chat_template="{{ messages }}",
        apply_chat_template=lambda messages, tokenize, add_generation_prompt: json.dumps(messages),
    )
    assert json.loads(format_prompts(["q1"], "chat", chat, "SYSTEM-X")[0]) == [
        {"role": "system", "content": "SYSTEM-X"},
        {"role": "user", "content": "q1"},
    ]


def test_sampling_refuses_no_completion_in_one_line():
    with pytest.raises(DotsError, match=r"n must be >= 1, got 0"):
        Sampling(n=0)
