"""Prompt templates of docs/method.md §8 (DoTS App. A.4).

- `dots_think`: the paper's system prompt, then `User: This is the problem: {QUESTION}
  Assistant: <think>` (Qwen series, training and inference).
- `llama_hybrid`: the same, followed by ` Answer: Let's think step by step.` (LLaMA-3.1-8B
  inference: the SFT `<think>` format plus the RLVR chain-of-thought prefix).
- `chat`: the tokenizer's chat template, system prompt as the system message, generation
  prompt appended.
- `plain`: the question as is.

The paper prints the prompt on one line; we keep its words and single spaces exactly
(straight quotes instead of the typeset curly ones). The verl/LUFFY parquet files carry
their own, slightly different system prompt (`LUFFY_SYSTEM_PROMPT`); a pool that brings
its own system message can pass it as `system_prompt`.
"""

from __future__ import annotations

from typing import Any, Sequence

from dots.errors import DotsError

__all__ = ["DOTS_SYSTEM_PROMPT", "LUFFY_SYSTEM_PROMPT", "TEMPLATES", "format_prompt", "format_prompts"]

DOTS_SYSTEM_PROMPT = (
    "Your task is to follow a systematic, thorough reasoning process before providing the final "
    "solution. This involves analyzing, summarizing, exploring, reassessing, and refining your "
    "thought process through multiple iterations. Structure your response into two sections: "
    "Thought and Solution. In the Thought section, present your reasoning using the format: "
    '"<think>\\n thoughts </think>\\n". Each thought should include detailed analysis, '
    'brainstorming, verification, and refinement of ideas. After "</think>\\n" in the Solution '
    "section, provide the final, logical, and accurate answer, clearly derived from the "
    "exploration in the Thought section. If applicable, include the answer in \\boxed{} for "
    "closed-form results like multiple choices or mathematical solutions."
)
"""App. A.4, verbatim (the `\\n` are the two characters backslash-n, as printed in the paper)."""

LUFFY_SYSTEM_PROMPT = (
    "Your task is to follow a systematic, thorough reasoning process before providing the final "
    "solution. This involves analyzing, summarizing, exploring, reassessing, and refining your "
    "thought process through multiple iterations. Structure your response into two sections: "
    "Thought and Solution. In the Thought section, present your reasoning using the format: "
    '"<think>\n {thoughts} </think>\n". Each thought should include detailed analysis, '
    'brainstorming, verification, and refinement of ideas. After "</think>\n," in the Solution '
    "section, provide the final, logical, and accurate answer, clearly derived from the "
    "exploration in the Thought section. If applicable, include the answer in \\boxed{} for "
    "closed-form results like multiple choices or mathematical solutions."
)
"""The system message of the LUFFY / verl parquet files (real newlines, `{thoughts}`)."""

DOTS_USER_TEMPLATE = "{system} User: This is the problem: {question} Assistant: <think>"
LLAMA_HYBRID_TEMPLATE = DOTS_USER_TEMPLATE + " Answer: Let's think step by step."

TEMPLATES = ("dots_think", "llama_hybrid", "chat", "plain")


def format_prompt(
    question: str,
    template: str = "dots_think",
    tokenizer: Any = None,
    system_prompt: str | None = None,
) -> str:
    """The text given to the engine for one question under a docs/method.md §8 template."""
    system = DOTS_SYSTEM_PROMPT if system_prompt is None else system_prompt
    if template == "dots_think":
        return DOTS_USER_TEMPLATE.format(system=system, question=question)
    if template == "llama_hybrid":
        return LLAMA_HYBRID_TEMPLATE.format(system=system, question=question)
    if template == "plain":
        return question
    if template == "chat":
        if tokenizer is None:
            raise DotsError("prompt template 'chat' needs the model's tokenizer")
        if not getattr(tokenizer, "chat_template", None):
            raise DotsError("prompt template 'chat': the tokenizer has no chat template; use dots_think or plain")
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    raise DotsError(f"unknown prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


def format_prompts(
    questions: Sequence[str],
    template: str = "dots_think",
    tokenizer: Any = None,
    system_prompt: str | None = None,
) -> list[str]:
    return [format_prompt(q, template, tokenizer, system_prompt) for q in questions]
