"""One lab of benchmarks/pick/samplers.py (and lab_study.py, prune_stop.py): its trio, the search
config pointed at it, the engine over the lab's fast KV-cached sampler with θ0 + Σλτ̃ swapped in,
its difficulty-aware selection and reference point; and the file locks by which several
worker processes share the jobs."""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from benchmarks.harness.results import REPO as ROOT
from benchmarks.harness.results import write_json

if TYPE_CHECKING:
    from dots.scoring.sampling import Sampling


def out_root() -> Path:
    return Path(os.environ.get("DOTS_OUTPUTS") or ROOT / "outputs") / "bench" / "lab_samplers"


LAB_OVERRIDES: dict[int, list[str]] = {}  # --lab-overrides 2:threads=1 → extra conf/lab.yaml keys of a lab


def parse_lab_overrides(items: Sequence[str]) -> None:
    for item in items:
        lab, _, rest = item.partition(":")
        LAB_OVERRIDES[int(lab)] = [x for x in rest.split(",") if x]


def lab_paths(lab: int, build: bool = False) -> dict[str, Path] | None:
    """The trio of `python -m dots.lab seed=<lab>` (the shipped one for seed 0), or None when it
    is not built yet (build=True: build it now)."""
    from dots.lab import ensure_trio
    from dots.lab.config import STAGES, load_config, shipped_dir, stage_dir

    overrides = [f"seed={lab}", *LAB_OVERRIDES.get(lab, [])]
    if build:
        return ensure_trio(overrides)
    cfg = load_config(overrides)
    paths = {}
    for stage in STAGES:
        path = shipped_dir(cfg, stage) or stage_dir(cfg, stage)
        if not path.is_dir():
            return None
        paths[stage] = path
    return paths


def search_cfg(lab: int, paths: dict[str, Path], extra: Sequence[str] = ()) -> Any:
    """conf/search.yaml with backbone=lab pointed at this lab's trio (and `extra` overrides)."""
    from dots.options.compose import compose

    return compose(
        "search",
        [
            "backbone=lab",
            "engine=hf",
            f"backbone.base={paths['base']}",
            f"backbone.sources.sft={paths['sft']}",
            f"backbone.sources.rlvr={paths['rlvr']}",
            "export.enabled=false",
            "search.range=[0.0,2.0]",  # the space these studies searched (the default became [0.5, 2.0] after them)
            "search.adaptive.enabled=false",  # all k samples unless a job asks (the default became adaptive after them)
            "pick=max_consistency",  # the pick they measured against (the default became smoothed, confirmed, in #42)
            "confirm.enabled=false",
            *extra,
        ],
    )


class LabEngine:
    """The Engine protocol over the lab's fast sampler: `LocalEngine` (KV-cached batched
    sampling of a lab-sized model) with θ0 + Σλτ̃ swapped in by dots' ResidentSynthesizer.
    `prompt_nll` batches prompts of equal length (the lab's are all 6 characters) and
    computes what LocalEngine.prompt_nll computes one prompt at a time."""

    def __init__(self, model: Path, task_vectors: Any):
        import torch

        from dots.lab.sampling import LocalEngine
        from dots.vectors import ResidentSynthesizer

        self.local = LocalEngine(model)
        self.synth = ResidentSynthesizer(task_vectors, device=torch.device("cpu"))
        self.tok = self.local.tok

    def generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[str]]:
        return self.local.generate(prompts, sampling)

    def prompt_nll(self, texts: Sequence[str]) -> list:
        import torch

        from dots.lab.sampling import encode
        from dots.scoring import PromptNLL

        ids = encode(self.tok, texts)
        out: list = [None] * len(ids)
        by_len: dict[int, list[int]] = {}
        for i, x in enumerate(ids):
            by_len.setdefault(len(x), []).append(i)
        with torch.no_grad():
            for length, rows in by_len.items():
                x = torch.tensor([ids[i] for i in rows])
                logp = torch.log_softmax(self.local.model(input_ids=x).logits[:, :-1].float(), -1)
                nll = -logp.gather(-1, x[:, 1:, None]).squeeze(-1).sum(-1)
                for r, i in enumerate(rows):
                    out[i] = PromptNLL(nll=float(nll[r]), tokens=length - 1)
        return out

    def swap_weights(self, weights) -> None:
        self.local.swap_weights(weights)

    def swap_checkpoint(self, path) -> None:
        self.local.swap_checkpoint(path)

    def swap_coefficients(self, coefficients) -> None:
        self.local.swap_weights(self.synth(coefficients))

    def close(self) -> None:  # one engine serves every study of a worker
        pass


class AsLoaded:
    """An engine whose swap_coefficients keeps the weights it holds (to score a checkpoint)."""

    def __init__(self, engine: Any):
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def swap_coefficients(self, coefficients: Any) -> None:
        pass


class Lab:
    """One lab's inputs for every study: τ̃, the selection (prompts), the engine, the reference point."""

    def __init__(self, lab: int):
        from transformers import AutoTokenizer

        from dots.io.problems import load_pool
        from dots.scoring import format_prompt
        from dots.search.pipeline import prepare
        from dots.search.steps import build_selection, build_vectors, load_selected

        self.lab = lab
        self.dir = out_root() / f"lab{lab}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.paths = lab_paths(lab, build=True)
        cfg = search_cfg(lab, self.paths, [f"run_dir={self.dir / 'selection'}", "seed=0"])
        run = prepare(cfg)
        run.run_dir.mkdir(parents=True, exist_ok=True)
        run.results.task_vectors = self.tv = build_vectors(run)
        run.queries = load_pool(cfg.pool)
        self.tokenizer = run.tokenizer = AutoTokenizer.from_pretrained(str(self.paths["base"]))
        run.prompts = {q.id: format_prompt(q.question, cfg.backbone.prompt, run.tokenizer) for q in run.queries}
        self.engine = run.engine = LabEngine(self.paths["base"], self.tv)
        with locked(self.dir / ".selection.lock"):
            chosen = load_selected(run) if (run.run_dir / "selection.jsonl").exists() else build_selection(run)
        self.prompts = [run.prompts[q.id] for q in chosen]
        self.ids = [q.id for q in chosen]  # the selected queries, in the order of a trial's answers
        self.record = next(run.run_dir.glob("difficulty-*.jsonl"), None)  # the sources' answers (selection)
        self.reference = self._reference(cfg)

    def _reference(self, cfg: Any) -> dict:
        """C and PPL of base, SFT and RLVR themselves under the full-k scorer, seed 0 (cached)."""
        from dots.options.study import study_options
        from dots.search.study.scorer import Scorer

        path = self.dir / "reference.json"
        if path.exists():
            return json.loads(path.read_text())
        scorer = Scorer(self.engine, self.prompts, study_options(cfg.search), self.tokenizer)
        ref = {}
        for stage, model in self.paths.items():
            self.engine.swap_checkpoint(model)
            scorer.engine = AsLoaded(self.engine)
            r = scorer({s: 0.0 for s in self.tv.sources}, seed=0)
            ref[stage] = {"consistency": r.consistency, "perplexity": r.perplexity, "tokens": r.tokens}
        write_json(path, ref)
        return ref


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def try_lock(path: Path) -> Any:
    fh = open(path, "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def claim(
    jobs: Sequence[dict], directory: Any, finished: Callable[[dict], bool] | None = None
) -> tuple[dict | None, Any]:
    """The first of `jobs` no other process holds and none has finished (`finished(job)`; by
    default: its `directory(job)` has a result.json), with the file lock that holds it; (None,
    None) when there is none."""
    done = finished or (lambda job: (directory(job) / "result.json").exists())
    for job in jobs:
        directory(job).mkdir(parents=True, exist_ok=True)
        lock = try_lock(directory(job) / ".claim.lock")
        if lock is not None and done(job):  # finished meanwhile
            lock.close()
            lock = None
        if lock is not None:
            return job, lock
    return None, None


def work_through(
    todo: Sequence[dict],
    finished: Callable[[dict], bool],
    directory: Callable[[dict], Path],
    run: Callable[[Any, dict], None],
    log: Any,
    idle: Callable[[], bool] = lambda: False,
) -> None:
    """One worker of a lab study: claim an unfinished job of a built lab (a file lock; any number of
    processes share the jobs), `run(lab, job)` with the worker's Lab for it, until none is left.
    While none can be claimed, `idle()` may do other work (True: it did some); else wait 20 s."""
    import time

    labs: dict[int, Any] = {}
    while True:
        pending = [j for j in todo if not finished(j)]
        if not pending:
            break
        ready = [j for j in pending if j["lab"] in labs or lab_paths(j["lab"]) is not None]  # built
        job, lock = claim(ready, directory, finished)
        if job is None:
            if not idle():
                log.info("nothing to claim (labs being built or jobs held by other workers); waiting")
                time.sleep(20)
            continue
        try:
            if job["lab"] not in labs:
                labs[job["lab"]] = Lab(job["lab"])
            t0 = time.perf_counter()
            run(labs[job["lab"]], job)
            log.info("%s done in %.0f s", "/".join(directory(job).parts[-2:]), time.perf_counter() - t0)
        finally:
            lock.close()


def study_parser(doc: str | None) -> tuple[argparse.ArgumentParser, Any]:
    """The command line of a study on labs (its subcommands added to the second value), with the
    study's progress logged to stdout and dots.search's own quiet."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("dots.search").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser, parser.add_subparsers(dest="cmd", required=True)


def lab_backbone(models: dict[str, Path], engine: str) -> list[str]:
    """The search overrides of the lab backbone with its trio (`models`: base, sft, rlvr) pinned."""
    pinned = [f"backbone.base={models['base']}", *(f"backbone.sources.{s}={models[s]}" for s in ("sft", "rlvr"))]
    return ["backbone=lab", f"engine={engine}", *pinned]
