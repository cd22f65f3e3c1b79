"""Answer extraction and grading cases the mutation check found untested (docs/testing.md); each
follows from the docstrings of dots/scoring/extract.py and dots/scoring/grade.py."""

from __future__ import annotations

from dots.scoring.extract import clean_phrase, extract_choice
from dots.scoring.grade import is_correct


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
