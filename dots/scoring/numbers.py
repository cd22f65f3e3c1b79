"""Plain numbers in answers, and when two of them are the same answer (docs/method.md §3, §7).

Most answers of the math benchmarks are one number, and math-verify gets three kinds
wrong, so dots reads numbers itself and decides them without parsing LaTeX:

- scientific notation: `4.4e7` (21% of Minerva's golds) reads as 4.4·e·7 in math-verify;
  here `4.4e7`, `4.4 \\times 10^{7}`, `4.4\\cdot10^7` and `44000000` are one value;
- percentages: inside `\\boxed{}` math-verify drops `\\%`, so `10\\%` never matched. A
  percent `p\\%` equals `p` and `p/100` (`50\\%` ≡ `50` ≡ `\\frac12`, but `50` ≢ `\\frac12`):
  the Qwen2.5-Math `math_equal` the DoTS/LUFFY evaluation descends from accepts both
  readings, and a question that asks for a percentage is answered either way;
- small numbers: math-verify rounds floats to 6 decimal places, so `1e-8` ≡ `2e-8`.
  Here two numbers are compared exactly when both are exact (integers, `142.0`,
  fractions, mixed numbers `1\\frac{4}{5}`): `3986729` ≢ `3986730`. When one is a
  decimal approximation (`0.5978`, `4.5e33`), they must agree to the precision of the
  less precise one (within half a unit of its last written digit) and within a relative
  `REL_TOL` (1e-4, Qwen2.5-Math's `numeric_equal`): `0.5978` ≡ `0.59776`, `2.7778e-6` ≡
  `2.777778 \\times 10^{-6}`, `\\frac13` ≡ `0.333333`; but `.35625` ≢ `.35626`, `4.5e33` ≢
  `4.52e33` and `\\frac13` ≢ `0.333` (the field's graders agree on these three).

Also read: a sign, `\\$` and `$…$`, thousands separators (`10,\\!080`, `58,500`: a plain
`d,ddd` is also tried as a list by math-verify when the numbers differ), numpy-style
`-1./3`. Anything else (units, symbols, several numbers) is not a plain number: None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["numbers_equal", "read_number"]

REL_TOL = 1e-4
MAX_EXPONENT = 400  # 10^k beyond this is not read as a plain number (math-verify decides)
MAX_DIGITS = 400

_INT = r"\d{1,3}(?:,\d{3})+|\d+"
_DEC = rf"(?:{_INT})(?:\.\d*)?|\.\d+"
_DEC_RE = re.compile(rf"(?P<m>{_DEC})")
_SCI_E_RE = re.compile(rf"(?P<m>{_DEC})[eE](?P<k>[+-]?\d+)")
_SCI_TEN_RE = re.compile(
    rf"(?P<m>{_DEC})\s*(?:\\times|\\cdot|\*|×|·)\s*10\s*\^\s*(?:\{{\s*(?P<k1>[+-]?\d+)\s*\}}|(?P<k2>[+-]?\d))"
)
_FRAC_RE = re.compile(r"\\[dt]?frac\s*(?:\{\s*(?P<a>[\d.]+)\s*\}|(?P<a1>\d))\s*(?:\{\s*(?P<b>[\d.]+)\s*\}|(?P<b1>\d))")
_SLASH_RE = re.compile(rf"(?P<a>{_DEC})\s*/\s*(?P<b>{_DEC})")
_MIXED_RE = re.compile(rf"(?P<n>\d+)\s*(?P<f>{_FRAC_RE.pattern})")
_PERCENT_RE = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\})\s*$")


@dataclass(frozen=True)
class Number:
    """A plain number: its value as written, whether it is exact, whether a percent, and
    for a decimal approximation the unit of its last written digit (`ulp`)."""

    value: Fraction
    exact: bool
    percent: bool = False
    ulp: Fraction | None = None


def _clean(text: str) -> str:
    s = text.strip()
    s = re.sub(r"(?<!\\)\$", "", s)
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s.strip())
    for token in ("\\!", "\\,", "\\;", "\\ ", "\\left", "\\right", "{,}", "\\$", "−"):
        s = s.replace(token, "-" if token == "−" else ("," if token == "{,}" else ""))
    s = s.strip()
    while s.startswith("{") and s.endswith("}") and _balanced(s[1:-1]):
        s = s[1:-1].strip()
    return s


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            return False
    return depth == 0


Parsed = tuple[Fraction, bool, "Fraction | None"]  # value, exact, ulp


def _decimal(text: str) -> Parsed | None:
    """(value, exact, ulp) of a decimal literal; integer-valued ones like `142.0` are exact."""
    text = text.replace(",", "")
    if len(text) > MAX_DIGITS:
        return None
    whole, _, frac = text.partition(".")
    value = Fraction(int(whole or "0")) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    exact = value.denominator == 1
    return value, exact, None if exact else Fraction(1, 10 ** len(frac))


def _unsigned(s: str) -> Parsed | None:
    if m := _SCI_E_RE.fullmatch(s) or _SCI_TEN_RE.fullmatch(s):
        groups = m.groupdict()
        k = int(groups.get("k") or groups.get("k1") or groups.get("k2") or "0")
        mant = _decimal(m.group("m"))
        if mant is None or abs(k) > MAX_EXPONENT:
            return None
        digits = len(m.group("m").partition(".")[2])
        scale = Fraction(10) ** k
        return mant[0] * scale, False, scale / 10**digits  # scientific notation: an approximation
    if _DEC_RE.fullmatch(s):
        return _decimal(s)
    if m := _MIXED_RE.fullmatch(s):
        frac = _unsigned(m.group("f"))
        return None if frac is None else (int(m.group("n")) + frac[0], frac[1], None)
    if m := _FRAC_RE.fullmatch(s):
        a, b = _decimal(m.group("a") or m.group("a1")), _decimal(m.group("b") or m.group("b1"))
    elif m := _SLASH_RE.fullmatch(s):
        a, b = _decimal(m.group("a")), _decimal(m.group("b"))
    else:
        return None
    if a is None or b is None or b[0] == 0:
        return None
    exact_parts = "." not in m.group(0) or (a[1] and b[1])
    return a[0] / b[0], bool(exact_parts), None


def read_number(text: str | None) -> Number | None:
    """The plain number an answer states, or None (see the module docstring)."""
    if text is None:
        return None
    s = _clean(str(text))
    percent = bool(_PERCENT_RE.search(s))
    if percent:
        s = _PERCENT_RE.sub("", s).strip()
    sign = 1
    if s and s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:].strip()
    if not s or not (s[0].isdigit() or s[0] in ".\\"):
        return None
    try:
        got = _unsigned(s)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if got is None:
        return None
    return Number(sign * got[0], got[1], percent, got[2])


def _close(x: Fraction, y: Fraction, exact: bool, ulp: Fraction | None) -> bool:
    if exact or x == y:
        return x == y
    if ulp is not None and abs(x - y) > ulp / 2:
        return False
    return abs(x - y) <= Fraction(REL_TOL) * max(abs(x), abs(y))


def numbers_equal(a: Number, b: Number) -> bool:
    """Same answer: exact when both are exact, else to the precision of the less precise
    and within `REL_TOL`; a lone percent `p` matches `p` or `p/100` (module docstring)."""
    exact = a.exact and b.exact
    if a.percent == b.percent:
        ulps = [u for u in (a.ulp, b.ulp) if u is not None]
        return _close(a.value, b.value, exact, max(ulps) if ulps else None)
    pct, other = (a, b) if a.percent else (b, a)
    for scale in (1, 100):
        ulps = [u for u in (other.ulp, None if pct.ulp is None else pct.ulp / scale) if u is not None]
        if _close(other.value, pct.value / scale, exact, max(ulps) if ulps else None):
            return True
    return False
