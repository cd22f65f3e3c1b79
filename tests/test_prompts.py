"""docs/method.md §8 prompt templates (DoTS App. A.4)."""

import pytest

from dots.errors import DotsError
from dots.lab.tokenizer import build_char_tokenizer
from dots.scoring.prompts import DOTS_SYSTEM_PROMPT, LUFFY_SYSTEM_PROMPT, TEMPLATES, format_prompt, format_prompts

Q = "What is $1+1$?"


def test_dots_think_is_the_papers_prompt():
    text = format_prompt(Q, "dots_think")
    assert text == DOTS_SYSTEM_PROMPT + " User: This is the problem: " + Q + " Assistant: <think>"
    assert DOTS_SYSTEM_PROMPT.startswith("Your task is to follow a systematic, thorough reasoning process")
    assert DOTS_SYSTEM_PROMPT.endswith("closed-form results like multiple choices or mathematical solutions.")
    assert "\\boxed{}" in DOTS_SYSTEM_PROMPT and "Thought and Solution" in DOTS_SYSTEM_PROMPT


def test_llama_hybrid_appends_the_cot_prefix():
    assert format_prompt(Q, "llama_hybrid") == format_prompt(Q, "dots_think") + " Answer: Let's think step by step."


def test_plain_and_custom_system_prompt():
    assert format_prompt(Q, "plain") == Q
    text = format_prompt(Q, "dots_think", system_prompt=LUFFY_SYSTEM_PROMPT)
    assert text.startswith(LUFFY_SYSTEM_PROMPT) and "{thoughts}" in text
    assert format_prompts([Q, "x"], "plain") == [Q, "x"]


def test_chat_uses_the_tokenizer_template():
    tok = build_char_tokenizer()
    with pytest.raises(DotsError, match="chat template"):
        format_prompt(Q, "chat", tokenizer=tok)
    with pytest.raises(DotsError, match="tokenizer"):
        format_prompt(Q, "chat")
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    text = format_prompt(Q, "chat", tokenizer=tok)
    assert text == f"<system>{DOTS_SYSTEM_PROMPT}\n<user>{Q}\n<assistant>"


def test_unknown_template():
    assert set(TEMPLATES) == {"dots_think", "llama_hybrid", "chat", "plain"}
    with pytest.raises(DotsError, match="unknown prompt template"):
        format_prompt(Q, "alpaca")
