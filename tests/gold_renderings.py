"""Gold answers of the packaged verl math parquet, written the ways models write them.

Shared by tests/test_grading_golds.py and benchmarks/grading/peers.py (which puts
tests/ on sys.path). Pure Python on purpose: nothing here calls the grader under test,
so a rendering can never be shaped by what the grader happens to accept.

For every gold `g` (the parquet's `reward_model.ground_truth`, as is):
- `boxed`, `answer_tag`, `answer_is`: the model form `m` of g (its `$…$` delimiters
  dropped, a bare `%` written `\\%`) at the end of a `<think>…</think>` completion, as
  `\\boxed{m}`, as `<answer>m</answer>`, and as "The answer is $m$.";
- `sci_times`, `sci_cdot`, `sci_plain` (golds like `4.4e7`): `4.4 \\times 10^{7}`,
  `4.4\\cdot10^{7}`, and the plain decimal `44000000` when it has at most 15 characters;
- `pct_latex`, `pct_number`, `pct_fraction` (golds like `62.5%`): `62.5\\%`, `62.5`,
  and the same value as a fraction of one, `0.625` — the field's reading of a percent;
- `exact_alt` (plain numeric golds): the same exact value in another form — `142.0` as
  `142`, `0.15` as `\\frac{3}{20}`, `\\frac{3}{2}` as `1.5`, `025` as `25`, `-1./3` as
  `-\\frac{1}{3}`; never a rounded decimal.
- `spans_tag`, `spans_boxed`, `spans_answer_is` (golds of several `$…$` spans, the way
  OlympiadBench writes multi-answer golds, e.g. `$69$,$84$`): the gold as written inside
  `<answer>…</answer>`; and, when only `,` / `;` / "and" part the spans (a list), one
  `$\\boxed{…}$` per span with the gold's separators kept, and "The answer is $69$,$84$.";
  `spans_perturbed`: the gold as written in `<answer>` with its first number changed,
  graded wrong (reading only the last span would still grade it right).
`perturbed`: the model form with its first number changed (integer part + 1; for an
e-notation gold the mantissa, written in LaTeX scientific notation), which must be
graded wrong. Golds without a digit get no perturbation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

PARQUET = Path(__file__).resolve().parents[1] / "dots" / "data" / "math" / "valid.all.dedup.parquet"

THINK = "<think>\nLet me work through the problem step by step and check the result.\n</think>\n"

_SCI_RE = re.compile(r"^\s*(-?)(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)\s*$")
_PCT_RE = re.compile(r"^\s*\$?\s*(-?\d+(?:\.\d+)?)\s*\\?%\s*\$?\s*$")
_FIRST_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
_SPAN_RE = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$")
_LIST_GAP_RE = re.compile(r"\s*(?:[,;]|and)\s*")


@dataclass(frozen=True)
class Rendering:
    source: str  # benchmark (parquet data_source)
    index: int  # row of the parquet
    gold: str  # ground truth, as in the parquet
    kind: str  # how the gold is written (see the module docstring)
    completion: str
    expect: bool  # True: must be graded correct; False (kind "perturbed"): wrong


def load_golds(path: Path = PARQUET) -> list[tuple[str, str]]:
    """(data_source, ground_truth) for every row of the parquet, in order."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["data_source", "reward_model"]).to_pylist()
    return [(row["data_source"], str(row["reward_model"]["ground_truth"])) for row in table]


def model_form(gold: str) -> str:
    """How a model writes the gold inside LaTeX: no `$` delimiters, `\\%` for a percent."""
    m = re.sub(r"(?<!\\)\$", "", gold).strip()
    m = re.sub(r"(?<!\\)%", r"\\%", m)
    return m


def _exact_value(text: str) -> Fraction | None:
    """The exact rational value of a plain numeric gold, or None."""
    s = text.strip().strip("$").strip()
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace(",\\!", "")
    neg = s.startswith("-")
    s = s[1:].strip() if neg else s
    value: Fraction | None = None
    if re.fullmatch(r"\d+\.?|\d*\.\d+", s):
        value = Fraction(s.rstrip(".") or "0")
    elif m := re.fullmatch(r"(\d+)\./(\d+)", s):  # numpy-style "-1./3"
        value = Fraction(int(m.group(1)), int(m.group(2)))
    elif m := re.fullmatch(r"\\frac\{?(\d+)\}?\{?(\d+)\}?", s) or re.fullmatch(r"\\frac\s*(\d)(\d)", s):
        value = Fraction(int(m.group(1)), int(m.group(2)))
    elif m := re.fullmatch(r"(\d+)/(\d+)", s):
        value = Fraction(int(m.group(1)), int(m.group(2)))
    if value is None:
        return None
    return -value if neg else value


def _decimal(value: Fraction) -> str | None:
    """The terminating decimal of value, or None when it does not terminate."""
    den = value.denominator
    for p in (2, 5):
        while den % p == 0:
            den //= p
    if den != 1:
        return None
    sign = "-" if value < 0 else ""
    num = abs(value)
    digits = 0
    while (num * 10**digits).denominator != 1:
        digits += 1
    whole = num.numerator * 10**digits // num.denominator
    text = str(whole).rjust(digits + 1, "0")
    return sign + (text[:-digits] + "." + text[-digits:] if digits else text)


def _fraction(value: Fraction) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def exact_alternatives(gold: str) -> list[str]:
    """The gold's exact value in another common form (see `exact_alt` above)."""
    value = _exact_value(gold)
    if value is None:
        return []
    written = gold.strip().strip("$").strip()
    out: list[str] = []
    if value.denominator == 1:
        plain = str(value.numerator)
        if plain != written:
            out.append(plain)  # 142.0 -> 142, 025 -> 25
        else:
            out.append(plain + ".0")  # 42 -> 42.0
    else:
        decimal = _decimal(value)
        if "frac" in written or "/" in written:
            if decimal is not None:
                out.append(decimal)  # \frac{3}{2} -> 1.5
            if "/" in written:
                out.append(_fraction(value))  # -1./3 -> -\frac{1}{3}
        else:
            out.append(_fraction(value))  # 0.15 -> \frac{3}{20}
    return out


def sci_forms(gold: str) -> list[tuple[str, str]]:
    """(kind, text) renderings of an e-notation gold; [] for any other gold."""
    m = _SCI_RE.match(gold)
    if not m:
        return []
    sign, mantissa, exp = m.group(1), m.group(2), int(m.group(3))
    forms = [
        ("sci_times", f"{sign}{mantissa} \\times 10^{{{exp}}}"),
        ("sci_cdot", f"{sign}{mantissa}\\cdot10^{{{exp}}}"),
    ]
    value = Fraction(mantissa) * Fraction(10) ** exp
    plain = _decimal(value)
    if plain is not None and len(plain) <= 15:
        forms.append(("sci_plain", sign + plain))
    return forms


def pct_forms(gold: str) -> list[tuple[str, str]]:
    """(kind, text) renderings of a percentage gold; [] for any other gold."""
    m = _PCT_RE.match(gold)
    if not m:
        return []
    number = m.group(1)
    fraction = _decimal(Fraction(number) / 100)
    assert fraction is not None
    return [("pct_latex", number + "\\%"), ("pct_number", number), ("pct_fraction", fraction)]


def spans(gold: str) -> tuple[list[str], bool]:
    """The `$…$` spans of a gold written as several (else []), and whether only `,` / `;` /
    "and" part them (a list of answers) rather than prose."""
    if len(re.findall(r"(?<!\\)\$", gold)) % 2:
        return [], False  # an unpaired `$` (`$221,$8$`): not a span list
    found = list(_SPAN_RE.finditer(gold))
    if len(found) < 2:
        return [], False
    gaps = [gold[a.end() : b.start()] for a, b in zip(found, found[1:])]
    ends = gold[: found[0].start()] + gold[found[-1].end() :]
    is_list = all(_LIST_GAP_RE.fullmatch(g) for g in gaps) and not ends.strip()
    return [m.group(1) for m in found], is_list


def span_forms(gold: str) -> list[tuple[str, str, str]]:
    """(kind, style, text) renderings of a gold of several spans; [] for any other gold."""
    parts, is_list = spans(gold)
    if not parts:
        return []
    forms = [("spans_tag", "answer_tag_raw", gold)]
    if is_list:
        boxed = _SPAN_RE.sub(lambda m: f"$\\boxed{{{m.group(1)}}}$", gold)
        forms += [("spans_boxed", "final_raw", boxed), ("spans_answer_is", "answer_is_raw", gold)]
    hit = _FIRST_NUMBER_RE.search(gold)
    if hit is not None:
        head, dot, tail = hit.group(0).partition(".")
        wrong = gold[: hit.start()] + str(int(head) + 1) + dot + tail + gold[hit.end() :]
        forms.append(("spans_perturbed", "answer_tag_raw", wrong))
    return forms


def perturb(gold: str) -> str | None:
    """The model form with its first number changed (see `perturbed` above)."""
    sci = _SCI_RE.match(gold)
    if sci:
        sign, mantissa, exp = sci.group(1), sci.group(2), sci.group(3)
        head, _, tail = mantissa.partition(".")
        bumped = str(int(head or "0") + 1) + ("." + tail if tail else "")
        return f"{sign}{bumped} \\times 10^{{{int(exp)}}}"
    m = model_form(gold)
    hit = _FIRST_NUMBER_RE.search(m)
    if hit is None:
        return None
    head, dot, tail = hit.group(0).partition(".")
    bumped = str(int(head) + 1) + dot + tail
    return m[: hit.start()] + bumped + m[hit.end() :]


def completions(kind: str, answer: str) -> str:
    """A think-then-answer completion stating `answer` (LaTeX; `_raw` kinds: text with its own
    `$` spans) in the format `kind`."""
    if kind in ("answer_tag", "answer_tag_raw"):
        return f"{THINK}<answer>{answer}</answer>"
    if kind == "answer_is":
        return f"{THINK}The answer is ${answer}$."
    if kind == "answer_is_raw":
        return f"{THINK}The answer is {answer}."
    if kind == "final_raw":
        return f"{THINK}So the final answer is {answer}."
    return f"{THINK}So the final answer is $\\boxed{{{answer}}}$."


def renderings(golds: list[tuple[str, str]] | None = None) -> list[Rendering]:
    """Every rendering of every gold (and its perturbation), in parquet order."""
    rows = load_golds() if golds is None else golds
    out: list[Rendering] = []
    for i, (source, gold) in enumerate(rows):
        m = model_form(gold)

        def add(kind: str, text: str, expect: bool = True, style: str = "boxed", src=source, i=i, gold=gold) -> None:
            out.append(Rendering(src, i, gold, kind, completions(style, text), expect))

        add("boxed", m)
        add("answer_tag", m, style="answer_tag")
        add("answer_is", m, style="answer_is")
        for kind, text in sci_forms(gold) + pct_forms(gold):
            add(kind, text)
        for text in exact_alternatives(gold):
            add("exact_alt", text)
        for kind, style, text in span_forms(gold):
            add(kind, text, expect=kind != "spans_perturbed", style=style)
        wrong = perturb(gold)
        if wrong is not None:
            add("perturbed", wrong, expect=False)
    return out
