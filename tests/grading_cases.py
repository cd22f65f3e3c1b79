"""Hand-written completions as reasoning models write them, each with its gold and the
verdict a careful grader gives (`truth`). Shared by tests/test_grading_cases.py and
benchmarks/grading/peers.py.

`group`: `format` (where the answer is written), `value` (how it is written), `wrong`
(a wrong answer that a lenient grader may accept), `policy` (a case the field grades
either way; `truth` is dots' documented choice, docs/grading.md).
"""

from __future__ import annotations

from dataclasses import dataclass

T = "<think>\nFirst I set up the equation, then I solve it and check the result.\n</think>\n"


@dataclass(frozen=True)
class Case:
    completion: str
    gold: str
    truth: bool
    group: str
    note: str


def _c(completion: str, gold: str, truth: bool, group: str, note: str) -> Case:
    return Case(completion, gold, truth, group, note)


CASES: list[Case] = [
    # --- format: where the answer is --------------------------------------------------
    _c(T + "Therefore the answer is $\\boxed{42}$.", "42", True, "format", "think + boxed"),
    _c(T + "<answer>42</answer>", "42", True, "format", "<answer> tag"),
    _c(T + "<answer>\nThe area is $\\boxed{42}$.\n</answer>", "42", True, "format", "box inside <answer>"),
    _c(T + "<answer> $\\frac{3}{4}$ </answer>", "\\frac{3}{4}", True, "format", "math in <answer>"),
    _c(
        "<think>\nMaybe \\boxed{12}? No, I dropped a term.\n</think>\nThe answer is 15.",
        "15",
        True,
        "format",
        "final phrase beats a box drafted in think",
    ),
    _c(
        "<think>\nMaybe \\boxed{12}? No, I dropped a term.\n</think>\nThe answer is 15.",
        "12",
        False,
        "format",
        "the drafted box is not the answer",
    ),
    _c(T + "The answer is: 3/4.", "\\frac{3}{4}", True, "format", "'answer is:' phrase"),
    _c(T + "So the answer is 5, because of symmetry.", "5", True, "format", "phrase then a clause"),
    _c(T + "So the answer is 5, because of symmetry.", "6", False, "format", "phrase then a clause, wrong"),
    _c(T + "**Final Answer:** **12**", "12", True, "format", "markdown bold"),
    _c(
        T + "Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.",
        "\\frac12",
        True,
        "format",
        "Minerva few-shot format",
    ),
    _c(T + "We get \\[\\boxed{x = 7}\\]", "7", True, "format", "display math, x = 7"),
    _c(T + "First \\boxed{3}, but correcting the sign error: \\boxed{-3}.", "-3", True, "format", "last box wins"),
    _c(T + "The answer is \\boxed{}.", "5", False, "format", "empty box is no answer"),
    _c(
        "<think>\nLet me compute 17 * 23 = 391. So the product is",
        "391",
        False,
        "format",
        "truncated in think, no answer stated",
    ),
    _c("Let me think. 17 * 23 = 391.\n\nThe final answer is $391$.", "391", True, "format", "no think tags"),
    _c(T + "Hence $\\boxed{\\text{(C)}}$", "\\text{(C)}", True, "format", "lettered option in MATH"),
    _c(T + "The answer is $\\$18.90$.", "\\$18.90", True, "format", "currency in a math span"),
    # --- value: how the answer is written --------------------------------------------
    _c(T + "The distance is $\\boxed{4.4 \\times 10^{7}}$ m.", "4.4e7", True, "value", "sci notation vs e-gold"),
    _c(T + "$\\boxed{44000000}$", "4.4e7", True, "value", "plain decimal vs e-gold"),
    _c(T + "$\\boxed{1.45\\cdot10^{-5}}$", "1.45e-5", True, "value", "cdot sci notation"),
    _c(T + "$\\boxed{2.777778 \\times 10^{-6}}$", "2.7778e-6", True, "value", "more digits than the gold"),
    _c(T + "$\\boxed{0.5978}$", "0.5978", True, "value", "decimal"),
    _c(T + "$\\boxed{62.5\\%}$", "62.5%", True, "value", "percent vs bare-% gold"),
    _c(T + "<answer>17.5\\%</answer>", "17.5%", True, "value", "percent in <answer>"),
    _c(T + "$\\boxed{8\\%}$", "$8 \\%$", True, "value", "percent with spaces"),
    _c(T + "$\\boxed{\\dfrac{3}{2}}$", "1.5", True, "value", "dfrac vs decimal"),
    _c(T + "$\\boxed{142}$", "142.0", True, "value", "AMC gold 142.0"),
    _c(T + "$\\boxed{25}$", "025", True, "value", "AIME gold 025"),
    _c(T + "$\\boxed{10080}$", "10,\\!080", True, "value", "thousands separator in gold"),
    _c(T + "$\\boxed{58{,}500}$", "58,500", True, "value", "thousands separator both"),
    _c(T + "$\\boxed{-\\frac{1}{3}}$", "-1./3", True, "value", "numpy-style gold"),
    _c(T + "$\\boxed{1.8}$", "1\\frac{4}{5}", True, "value", "mixed number gold"),
    _c(T + "$\\boxed{90^\\circ}$", "90", True, "value", "degrees"),
    _c(
        T + "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        True,
        "value",
        "polar pair",
    ),
    _c(T + "$\\boxed{(3,\\tfrac{\\pi}{2})}$", "\\left( 3, \\frac{\\pi}{2} \\right)", True, "value", "tfrac pair"),
    _c(T + "$\\boxed{[2,5)}$", "[2,5)", True, "value", "interval"),
    _c(T + "$\\boxed{\\{1, 3\\}}$", "1,3", True, "value", "set vs bare list gold"),
    _c(T + "$\\boxed{3, 1}$", "1,3", True, "value", "bare list, other order"),
    _c(T + "$\\boxed{(1,8,19), (2,7,13), (4,5,7)}$", "$(1,8,19), (2,7,13), (4,5,7)$", True, "value", "list of triples"),
    _c(T + "$\\boxed{\\frac{\\sqrt{2}}{2}}$", "\\frac{1}{\\sqrt{2}}", True, "value", "rationalised"),
    _c(T + "$\\boxed{2\\sqrt{113}}$", "2\\sqrt{113}", True, "value", "surd"),
    _c(T + "$\\boxed{x^2+2x+1}$", "(x+1)^2", True, "value", "expanded polynomial"),
    _c(T + "$\\boxed{f(x) = 2x}$", "$f(x)=2 x$", True, "value", "function answer"),
    _c(
        T + "$\\boxed{\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}}$",
        "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}",
        True,
        "value",
        "subscripted E",
    ),
    _c(T + "$\\boxed{\\arcsin\\left(\\frac{10}{13}\\right)}$", "np.arcsin(10/13)", True, "value", "numpy gold"),
    _c(T + "$\\boxed{\\text{Evelyn}}$", "\\text{Evelyn}", True, "value", "text answer"),
    _c(T + "$\\boxed{5.4 \\text{ cents}}$", "5.4 \\text{ cents}", True, "value", "units, same"),
    _c(
        T + "$\\boxed{\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}}$",
        "\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}",
        True,
        "value",
        "vector",
    ),
    # --- wrong answers -------------------------------------------------------------------
    _c(T + "$\\boxed{2 \\times 10^{-8}}$", "1e-8", False, "wrong", "small sci numbers differ"),
    _c(T + "$\\boxed{2e-8}$", "1e-8", False, "wrong", "small e-numbers differ"),
    _c(T + "$\\boxed{4.52 \\times 10^{33}}$", "4.5e33", False, "wrong", "beyond the gold's precision"),
    _c(T + "$\\boxed{.35626}$", ".35625", False, "wrong", "last digit differs"),
    _c(T + "$\\boxed{3986730}$", "3986729", False, "wrong", "large integer off by one"),
    _c(T + "$\\boxed{(2,1)}$", "(1,2)", False, "wrong", "ordered pair reversed"),
    _c(T + "$\\boxed{[0,1]}$", "(0,1)", False, "wrong", "closed vs open interval"),
    _c(T + "$\\boxed{-42}$", "42", False, "wrong", "sign"),
    _c(
        T + "$\\boxed{\\frac{2}{3} E_{1}+\\frac{2}{3} E_{2}}$",
        "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}",
        False,
        "wrong",
        "subscripted E, coefficient differs",
    ),
    _c(T + "$\\boxed{63.5\\%}$", "62.5%", False, "wrong", "percent differs"),
    _c(T + "$\\boxed{0.33}$", "\\frac{1}{3}", False, "wrong", "rounded too early"),
    _c(T + "$\\boxed{x^2+1}$", "(x+1)^2", False, "wrong", "polynomial differs"),
    _c(T + "The answer is 5, because 3 + 4 = 7.", "7", False, "wrong", "numbers after the clause"),
    # --- policy: graded either way in the field; truth = dots' documented choice ------
    _c(T + "$\\boxed{\\{1,2\\}}$", "(1,2)", False, "policy", "set is not a tuple"),
    _c(T + "$\\boxed{2:3}$", "\\frac{2}{3}", True, "policy", "ratio is its quotient"),
    _c(T + "$\\boxed{10}$", "10\\%", True, "policy", "percent vs its number"),
    _c(T + "$\\boxed{\\frac{1}{2}}$", "50\\%", True, "policy", "percent vs its fraction"),
    _c(T + "$\\boxed{0.333333}$", "\\frac{1}{3}", True, "policy", "decimal to 6 places"),
    _c(T + "$\\boxed{3 \\times 10^{8}}$", "299792458", False, "policy", "sci approximation of an exact integer"),
]
