"""Both engines provide the whole `Engine` protocol (dots.engines.base), checked by mypy: every
member, with signatures that fit, so that the callers typed `Engine` (the search, the scorer,
the canary, the evaluation, the doctor) are checked against what the engines really have."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CHECK = """
from dots.engines.base import Engine
from dots.engines.hf import HFEngine
from dots.engines.vllm.engine import VLLMEngine

engines: list[type[Engine]] = [HFEngine, VLLMEngine]
"""


def mypy_errors(tmp_path: Path, program: str) -> list[str]:
    """mypy's error lines on `program`, checked with the project's settings (pyproject.toml)."""
    api = pytest.importorskip("mypy.api")
    path = tmp_path / "check_engines.py"
    path.write_text(program)
    out, err, _ = api.run(["--config-file", str(REPO / "pyproject.toml"), "--no-error-summary", str(path)])
    return [line for line in (out + err).splitlines() if ": error:" in line]


def test_both_engine_classes_satisfy_the_protocol(tmp_path, monkeypatch):
    """HFEngine and VLLMEngine pass; and the check can fail: a class without a working
    `use_public_path` (which the canary calls on a failed swap) is refused, the only error."""
    monkeypatch.chdir(REPO)
    lacking = CHECK + (
        "\nclass NoPublicPath(HFEngine):\n    use_public_path = None  # type: ignore[assignment]\n\n"
        "more: list[type[Engine]] = [NoPublicPath]\n"
    )
    errors = mypy_errors(tmp_path, lacking)
    assert len(errors) == 1 and f":{lacking.count(chr(10))}:" in errors[0] and '"type[NoPublicPath]"' in errors[0]
