"""The shape of `dots/`: layers imported downward only, no import cycle, at most 8 top-level
modules, no module over 300 lines.

Every module of dots/ is read with `ast` (nothing is imported); every `import` and
`from … import` is an edge — at module level, inside functions and under TYPE_CHECKING
alike. `from pkg import name` points at `pkg.name` when that is a module, else at `pkg`.
A package's `__main__` is its command: commands sit above every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import write_tree

ROOT = Path(__file__).resolve().parent.parent / "dots"

# lowest first; a module may import its own layer and the layers before it
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dots", "dots.errors", "dots.keys", "dots.plain", "dots.paths", "dots.checks", "dots.registry"),  # the base
    ("dots.runtime",),  # process plumbing: allocator, devices, signals, locks, reaper, progress
    ("dots.io",),  # checkpoints, safetensors, shapes, tensor names, pools and benchmarks
    ("dots.vectors", "dots.scoring"),  # τ, τ̃, synthesis and where τ̃ is held; grading
    ("dots.lab",),  # the lab trio (registers its config resolver and pool kind)
    ("dots.options",),  # the commands' configs (which name the lab), command line, typed options
    ("dots.export",),  # the one door a model leaves dots by: written with its card (and pushed)
    ("dots.merge",),  # merges
    ("dots.engines",),  # live models whose weights are swapped
    ("dots.plan",),  # the memory plan: the engines' declared needs added up
    ("dots.search", "dots.evaluate", "dots.analyze"),  # the pipelines
    ("dots.testing",),  # generated checkpoints for tests and benchmarks
    ("dots.doctor",),  # a new node checked end to end on a generated model
)
COMMANDS = len(LAYERS)  # the layer of every `__main__`
MAX_TOP_LEVEL = 8
MAX_LINES = 300


def module_files() -> dict[str, Path]:
    """Dotted name → file of every module of dots/ (a package is its __init__)."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the dots modules it imports anywhere in its source."""

    def known(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) or "" for a in node.names if a.name.split(".")[0] == "dots")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                if base.split(".")[0] != "dots":
                    continue
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.add(child if child in modules else known(base) or "")
        edges[name] = targets - {"", name}
    return edges


def layer_of(module: str) -> int:
    """The layer index of a module: its package's, by the longest declared prefix."""
    if module.rpartition(".")[2] == "__main__":
        return COMMANDS
    best, index = -1, None
    for i, names in enumerate(LAYERS):
        for prefix in names:
            inside = module.startswith(prefix + ".") and prefix != "dots"  # `dots` itself: only its __init__
            if (module == prefix or inside) and len(prefix) > best:
                best, index = len(prefix), i
    if index is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS in tests/test_layers.py")
    return index


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    modules = module_files()
    return modules, import_edges(modules)


def test_the_reader_sees_function_level_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "dots"
    write_tree(
        tmp_path,
        {
            "dots/__init__.py": "",
            "dots/a/__init__.py": "",
            "dots/a/x.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dots.a.y import T\n"
                "def f():\n    from . import z\n"
            ),
            "dots/a/y.py": "import dots.a.x\n",
            "dots/a/z.py": "from dots.a import x as _x\n",
        },
    )
    modules = {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p for p in pkg.rglob("*.py")
    }
    edges = import_edges(modules)
    assert edges["dots.a.x"] == {"dots.a.y", "dots.a.z"}
    assert sorted(map(sorted, cycles(edges))) == [["dots.a.x", "dots.a.y", "dots.a.z"]]


def test_no_import_cycle(graph):
    _, edges = graph
    assert cycles(edges) == []


def test_no_module_imports_a_higher_layer(graph):
    _, edges = graph
    upward = sorted(
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in edges.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert upward == []


def test_every_package_is_in_a_layer(graph):
    modules, _ = graph
    for module in modules:
        layer_of(module)


def test_few_top_level_modules():
    top = sorted(p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL, top


# Only these turn a config into typed options or plain values (and the commands read it): the
# option modules, plain.py, errors.py and every `__main__`.
OMEGACONF_ALLOWED = ("dots.options", "dots.plain", "dots.errors")


def imports_omegaconf(path: Path) -> bool:
    """The module imports omegaconf anywhere (module level, in a function, under TYPE_CHECKING)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "omegaconf" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "omegaconf" and not node.level:
            return True
    return False


def test_only_the_option_modules_and_commands_import_omegaconf(graph):
    modules, _ = graph
    allowed = [m for m in modules if any(m == p or m.startswith(p + ".") for p in OMEGACONF_ALLOWED)]
    readers = sorted(
        name
        for name, path in modules.items()
        if imports_omegaconf(path) and name.rpartition(".")[2] != "__main__" and name not in allowed
    )
    assert readers == []


def test_the_omegaconf_reader_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from omegaconf import DictConfig\n")
    assert imports_omegaconf(module)
    module.write_text("from dots.plain import to_plain\nimport omegaconfig\n")
    assert not imports_omegaconf(module)


def test_no_module_over_300_lines(graph):
    modules, _ = graph
    long = {n: c for n, p in modules.items() if (c := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
