"""What crosses a package has a public name: no module imports an `_underscore` name from a module
of another top-level package of dots (`dots.vectors`, `dots.engines`, `dots.errors`, ...), and every
name imported across packages is in its module's `__all__` (what a module offers, said where it is
defined). tests/, benchmarks/ and scripts/ are packages of their own: they, too, use only public names.

Every file is read with `ast`; imports inside functions count. Relative imports stay inside
their package and are never crossings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import write_tree

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


def crossings(root: Path):
    """(file, line, importing module, imported module, name) of every `from dots… import name`
    (absolute) anywhere in the trees."""
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            importer = ".".join(path.relative_to(root).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("dots"):
                    continue
                for alias in node.names:
                    yield path.relative_to(root), node.lineno, importer, str(node.module), alias.name


def private_crossings(root: Path) -> list[str]:
    """`file:line: from module import _name` for every private name imported across packages."""
    found = []
    for file, line, importer, module, name in crossings(root):
        private = name.startswith("_") and not name.startswith("__")
        if private and package_of(module) != package_of(importer) and f"{module}.{name}" not in PENDING:
            found.append(f"{file}:{line}: from {module} import {name}")
    return found


def module_file(root: Path, module: str) -> Path | None:
    """The file of a dotted module under `root` (a package: its __init__), or None."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def declared_all(path: Path) -> list[str] | None:
    """A module's `__all__` as written (a list or tuple of strings), or None."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
    return None


def outside_all(root: Path) -> list[str]:
    """`file:line: from module import name` for every name imported across packages that is not
    in `module.__all__` (a submodule imported from its package is not a name)."""
    found = []
    for file, line, importer, module, name in crossings(root):
        path = module_file(root, module)
        if path is None or package_of(module) == package_of(importer) or module_file(root, f"{module}.{name}"):
            continue
        if name not in (declared_all(path) or []):
            found.append(f"{file}:{line}: from {module} import {name}")
    return found


# each scan on a small tree of its own: (the scan, the tree's files, the lines it must report)
PLANTED = {
    "private-name": (
        private_crossings,
        {
            "dots/a/x.py": (
                "from dots.a.y import _same_package\nfrom dots import __version__\nfrom . import _relative\n"
                "def f():\n    from dots.b.z import _hidden\n"
            ),
            "tests/test_x.py": "from dots.a.x import _f, public\n",
        },
        ["dots/a/x.py:5: from dots.b.z import _hidden", "tests/test_x.py:1: from dots.a.x import _f"],
    ),
    "outside-all": (
        outside_all,
        {
            "dots/a/x.py": '__all__ = ["offered"]\n\ndef offered(): ...\ndef kept(): ...\n',
            "dots/a/y.py": "from dots.a.x import kept\n",  # same package: fine
            "dots/b/z.py": "from dots.a.x import offered, kept\nfrom dots.a import x\n",
            "tests/test_x.py": "def f():\n    from dots.a.x import kept\n",
        },
        ["dots/b/z.py:1: from dots.a.x import kept", "tests/test_x.py:2: from dots.a.x import kept"],
    ),
}


@pytest.mark.parametrize("scan,files,found", PLANTED.values(), ids=list(PLANTED))
def test_the_scan_finds_what_is_planted(tmp_path, scan, files, found):
    write_tree(tmp_path, files)
    assert scan(tmp_path) == found


def test_no_private_name_crosses_a_package():
    assert private_crossings(REPO) == []


def test_what_crosses_a_package_is_in_its_all():
    assert outside_all(REPO) == []
