"""Every reference in the documentation points at something that exists.

Read: README.md and docs/*.md (all of their text), the docstrings and comments of every Python
file under dots/, tests/, benchmarks/ and scripts/, and the comments of dots/conf/**/*.yaml,
scripts/**/*.sh and .ci/run. A reference is stale when it names
- a repository path (`dots/...`, `tests/...`, `benchmarks/...`, `scripts/...`, `docs/...`,
  `.ci/...`) that does not exist, or a test file (`test_*.py`) found nowhere;
- a test (`tests/<file>.py::<name>`, or a bare `test_*` name) that is not defined;
- a module or attribute `dots.<package>.<name>` that is neither a module, nor a name in its
  module, nor a string the code uses (a logger or profiler label);
- a section `method.md §n` that docs/method.md does not have;
- a markdown link or anchor (`[text](path#anchor)`) that does not resolve.
README.md and docs/ must not cite the method and design specifications that were never in the
repository. Regular expressions over the text: about a second.
"""

from __future__ import annotations

import ast
import functools
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parent.parent
PATH_ROOTS = ("dots", "tests", "benchmarks", "scripts", "docs", ".ci")
PATH_RE = re.compile(r"(?<![\w./\\-])(?:\.ci|dots|tests|benchmarks|scripts|docs)/[\w./-]*")
PLACEHOLDER_START = set("<{*[$")  # `dots/conf/method/<name>.yaml`, `docs/*.md`: check the directory
TEST_ID_RE = re.compile(r"(?<![\w/.])((?:tests/)?test_\w+\.py)::([\w:]+)")
BARE_TEST_FILE_RE = re.compile(r"(?<![\w/.-])(test_\w+\.py)\b")
BARE_TEST_NAME_RE = re.compile(r"(?<![\w/.:-])(test_\w+)\b(?!\.py|::)")
DOTTED_RE = re.compile(r"(?<![\w./-])dots(?:\.[A-Za-z_]\w*)+(?![\w/-])")
SECTION_RE = re.compile(r"method\.md\)?\s*§\s*(\d+(?:\.\d+)*)")
LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE_RE = re.compile(r"\bSPEC\.md\b|\bDESIGN\.md\b|\bSPEC\s*§")


@dataclass(frozen=True)
class Text:
    """One piece of documentation: where it is (file, first line) and what it says."""

    path: Path
    line: int
    text: str
    markdown: bool = False

    def where(self, offset: int = 0) -> str:
        line = self.line + self.text.count("\n", 0, offset)
        return f"{self.path.relative_to(REPO)}:{line}"


# --- what is read -------------------------------------------------------------------------


def markdown_files() -> list[Path]:
    """README.md and the docs pages (not benchmarks/RESULTS.md: a dated log, true when written)."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def python_files() -> list[Path]:
    return sorted(p for root in ("dots", "tests", "benchmarks", "scripts") for p in (REPO / root).rglob("*.py"))


def comment_files() -> list[Path]:
    conf, scripts = REPO / "dots" / "conf", REPO / "scripts"
    return [*sorted(conf.rglob("*.yaml")), *sorted(scripts.rglob("*.sh")), REPO / ".ci" / "run"]


# Read left to right, a Python file is code, strings and comments. A triple-quoted string is
# documentation (a docstring, or the rare multi-line text), a one-line string is code (a logger
# or profiler label, a path the code opens), a comment is documentation.
PIECES = re.compile(r'(?s)""".*?"""' + r"|'''.*?'''" + r'|"(?:\\.|[^"\\\n])*"' + r"|'(?:\\.|[^'\\\n])*'" + r"|#[^\n]*")


def split_python(path: Path, source: str) -> tuple[list[Text], str]:
    """The documentation of one Python file (triple-quoted strings and comments, each with its
    line) and its code with those left out. A regular expression rather than `ast` and
    `tokenize`, which take seconds over the whole tree."""
    docs, code, last, line = [], [], 0, 1
    for m in PIECES.finditer(source):
        line += source.count("\n", last, m.start())
        piece = m.group(0)
        if piece.startswith("#") or piece[:3] in ('"""', "'''"):
            docs.append(Text(path, line, piece))
            code.append(source[last : m.start()])
        else:
            code.append(source[last : m.end()])
        line += piece.count("\n")
        last = m.end()
    code.append(source[last:])
    return docs, " ".join(code)


@functools.cache
def python_split() -> dict[Path, tuple[list[Text], str]]:
    return {p: split_python(p, p.read_text(encoding="utf-8")) for p in python_files()}


@functools.cache
def documentation() -> tuple[Text, ...]:
    texts = [Text(p, 1, p.read_text(encoding="utf-8"), markdown=True) for p in markdown_files()]
    for docs, _ in python_split().values():
        texts += docs
    for path in comment_files():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "#" in line:
                texts.append(Text(path, i, line[line.index("#") :]))
    return tuple(texts)


@functools.cache
def code_names() -> frozenset[str]:
    """Every word and dotted name the Python code uses, its one-line strings included (not its
    docstrings or comments; not this file, whose examples of stale references are data)."""
    names: set[str] = set()
    for path, (_, code) in python_split().items():
        if path != Path(__file__).resolve():
            names.update(re.findall(r"[\w.]+", code))
            names.update(re.findall(r"\w+", code))
    return frozenset(names)


# --- the checks: each returns one line per stale reference -----------------------------------


def stale_paths(text: Text) -> list[str]:
    problems = []
    for m in PATH_RE.finditer(text.text):
        ref = m.group(0)
        after = text.text[m.end() : m.end() + 1]
        if after in PLACEHOLDER_START or ref.endswith("-"):
            ref = ref[: ref.rfind("/") + 1]  # a template: its directory must exist
        ref = ref.rstrip(".,;:")
        if ref and not (REPO / ref).exists():
            problems.append(f"{text.where(m.start())}: no such file or directory {ref}")
    for m in BARE_TEST_FILE_RE.finditer(text.text):
        if not any(root.joinpath(m.group(1)).exists() for root in (REPO / "tests", REPO / "benchmarks")):
            problems.append(f"{text.where(m.start())}: no test file {m.group(1)}")
    return problems


def defined_in(path: Path, dotted: str) -> bool:
    """Whether `Class::method` or `function` is defined (def or class) in a Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope: list[ast.stmt] = tree.body
    for name in dotted.split("::"):
        match = [
            n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
        ]
        if not match:
            return False
        scope = match[0].body
    return True


def stale_tests(text: Text) -> list[str]:
    problems = []
    for m in TEST_ID_RE.finditer(text.text):
        file = m.group(1) if m.group(1).startswith("tests/") else f"tests/{m.group(1)}"
        path = REPO / file
        if not path.exists():
            problems.append(f"{text.where(m.start())}: no test file {file}")
        elif not defined_in(path, m.group(2)):
            problems.append(f"{text.where(m.start())}: {file} defines no {m.group(2)}")
    for m in BARE_TEST_NAME_RE.finditer(text.text):
        name = m.group(1)
        if name not in code_names() and not (REPO / "tests" / f"{name}.py").exists():
            problems.append(f"{text.where(m.start())}: no test, module or name {name}")
    return problems


def module_has(path: Path, name: str) -> bool:
    source = path.read_text(encoding="utf-8")
    return re.search(rf"\b{re.escape(name)}\b", source) is not None


def dotted_exists(dotted: str) -> bool:
    """`dots.<package>.<module>.<name>`: a chain of packages and modules, then at most one name found in the last one;
    or a string the code uses (a logger or profiler label such as `dots.hf.copy`)."""
    if dotted in code_names():
        return True
    here = REPO / "dots"
    for part in dotted.split(".")[1:]:
        if here.is_dir() and (here / part / "__init__.py").exists():
            here = here / part
        elif here.is_dir() and (here / f"{part}.py").exists():
            here = here / f"{part}.py"
        else:
            return module_has(here / "__init__.py" if here.is_dir() else here, part)
    return True


def stale_modules(text: Text) -> list[str]:
    return [
        f"{text.where(m.start())}: no module or name {m.group(0)}"
        for m in DOTTED_RE.finditer(text.text)
        if not dotted_exists(m.group(0).rstrip("."))
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces → hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(c for c in text if c.isalnum() or c in "_- " or unicodedata.category(c).startswith("M"))
    return kept.replace(" ", "-")


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for i, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((i, line))
    return lines


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


@functools.cache
def method_sections() -> frozenset[str]:
    """The section numbers of docs/method.md: `## 4. Coefficient search` → "4", `### 5.1 …` → "5.1"."""
    found = set()
    for _, line in prose_lines((REPO / "docs" / "method.md").read_text(encoding="utf-8")):
        m = re.match(r"#{2,4}\s+(\d+(?:\.\d+)*)\.?\s", line)
        if m:
            found.add(m.group(1))
    return frozenset(found)


def stale_sections(text: Text) -> list[str]:
    sections = method_sections()
    return [
        f"{text.where(m.start())}: docs/method.md has no §{m.group(1)}"
        for m in SECTION_RE.finditer(text.text)
        if m.group(1) not in sections
    ]


def stale_links(text: Text) -> list[str]:
    problems = []
    for number, line in prose_lines(text.text):
        for m in LINK_RE.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (text.path.parent / file).resolve() if file else text.path
            where = f"{text.path.relative_to(REPO)}:{text.line + number - 1}"
            if not path.exists():
                problems.append(f"{where}: link to a missing file {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                problems.append(f"{where}: {path.relative_to(REPO)} has no heading #{anchor}")
    return problems


def outside_citations(text: Text) -> list[str]:
    return [
        f"{text.where(m.start())}: cites {m.group(0)}, not in the repository" for m in OUTSIDE_RE.finditer(text.text)
    ]


def problems_of(check: Callable[[Text], list[str]], texts: Iterable[Text]) -> list[str]:
    return [p for t in texts for p in check(t)]


# --- the tests ------------------------------------------------------------------------------


def test_named_paths_exist() -> None:
    assert problems_of(stale_paths, documentation()) == []


def test_named_tests_exist() -> None:
    assert problems_of(stale_tests, documentation()) == []


def test_named_modules_exist() -> None:
    assert problems_of(stale_modules, documentation()) == []


def test_method_sections_exist() -> None:
    assert {str(n) for n in range(1, 9)} <= method_sections()
    assert problems_of(stale_sections, documentation()) == []


def test_markdown_links_and_anchors_resolve() -> None:
    assert problems_of(stale_links, [t for t in documentation() if t.markdown]) == []


def test_docs_and_code_cite_only_the_repository() -> None:
    assert problems_of(outside_citations, documentation()) == []


def test_each_check_catches_a_stale_reference() -> None:
    """The checks above would pass vacuously if they matched nothing: feed each one a stale and a
    sound reference."""
    readme = REPO / "README.md"

    def text(s: str, markdown: bool = False) -> Text:
        return Text(readme, 1, s, markdown)

    assert stale_paths(text("see dots/search/nothing_here.py and tests/test_gone.py"))
    assert stale_paths(text("run test_gone.py"))
    assert not stale_paths(text("see dots/search/pipeline.py, dots/conf/method/<name>.yaml, docs/*.md."))
    assert stale_tests(text("tests/test_pareto.py::test_no_such_test"))
    assert stale_tests(text("the search is in test_no_such_function (marked slow)"))
    assert not stale_tests(text(f"tests/test_doc_references.py::{test_each_check_catches_a_stale_reference.__name__}"))
    assert stale_modules(text("`dots.search.no_such_module` and `dots.nothing`"))
    assert not stale_modules(text("`dots.search.pipeline.prepare`, `dots.scoring`, `dots.hf.copy`"))
    assert stale_sections(text("see docs/method.md §42"))
    assert not stale_sections(
        text("see docs/method.md §4 and [method.md §1](docs/method.md#1-task-vector-sparsification)")
    )
    assert stale_links(text("[x](docs/missing.md) [y](docs/method.md#no-such-heading)", markdown=True))
    assert not stale_links(text("[x](docs/method.md#4-coefficient-search) [y](https://example.org)", markdown=True))
    assert outside_citations(text("as SPEC §3 says", markdown=True))
    assert slug("Where θ0 and τ̃ live: the memory plan") == "where-θ0-and-τ̃-live-the-memory-plan"
