"""What crosses a package has a public name: no module imports an `_underscore` name from a module
of another top-level package of dots (`dots.vectors`, `dots.engines`, `dots.errors`, ...).
tests/, benchmarks/ and scripts/ are packages of their own: they, too, use only public names.

Every file is read with `ast`; imports inside functions count. Relative imports stay inside
their package and are never crossings.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREES = ("dots", "tests", "benchmarks", "scripts")

# private names still imported across a package, each with where it is being made public; empty
# this once that branch is merged
PENDING: dict[str, str] = {}  # private names allowed to cross for now, and why (none)


def package_of(module: str) -> str:
    """The top-level package a dotted module belongs to: `dots.<first part>` inside dots, else
    its tree (tests, benchmarks, scripts)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "dots" else parts[0]


def private_crossings(root: Path) -> list[str]:
    """`file:line: from module import _name` for every private name imported across packages."""
    found = []
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            importer = ".".join(path.relative_to(root).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("dots"):
                    continue
                module = str(node.module)
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    crossing = package_of(module) != package_of(importer)
                    if private and crossing and f"{module}.{alias.name}" not in PENDING:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: from {module} import {alias.name}")
    return found


def test_the_scan_finds_a_private_name_imported_from_another_package(tmp_path):
    (tmp_path / "dots" / "a").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "dots" / "a" / "x.py").write_text(
        "from dots.a.y import _same_package\nfrom dots import __version__\nfrom . import _relative\n"
        "def f():\n    from dots.b.z import _hidden\n"
    )
    (tmp_path / "tests" / "test_x.py").write_text("from dots.a.x import _f, public\n")
    assert private_crossings(tmp_path) == [
        "dots/a/x.py:5: from dots.b.z import _hidden",
        "tests/test_x.py:1: from dots.a.x import _f",
    ]


def test_no_private_name_crosses_a_package():
    assert private_crossings(REPO) == []
