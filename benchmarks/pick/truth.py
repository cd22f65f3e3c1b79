"""The ground truth of benchmarks/pick/samplers.py: greedy accuracy on a lab's test split of a merge
λ, a checkpoint or a classic merge (cached per lab), and the hypervolume of a study's running
front against the lab's reference point."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Sequence

from benchmarks.harness.lab import lab_paths, out_root, search_cfg
from benchmarks.harness.results import write_json

METHODS = {  # the classic merges of benchmarks/pick/methods.sh, defaults of conf/method/*.yaml
    "task_arithmetic": ["method=task_arithmetic"],
    "ties": ["method=ties"],
    "dare_ties": ["method=dare_ties"],
    "ram_plus": ["method=ram_plus"],
    "sar": ["method=sar"],
}


GRID = (0.0, 0.5, 1.0, 1.5, 2.0)


def hypervolume(points: Sequence[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Area dominated by (C, PPL) points (C maximised, PPL minimised) inside the box they
    share with the reference point (C_r, PPL_r): a sweep in order of increasing PPL."""
    c_ref, p_ref = ref
    pts = sorted((p, c) for c, p in points if c > c_ref and p < p_ref)
    area, best_c = 0.0, c_ref
    for i, (p, c) in enumerate(pts):
        best_c = max(best_c, c)
        nxt = pts[i + 1][0] if i + 1 < len(pts) else p_ref
        area += (best_c - c_ref) * (nxt - p)
    return area


def hv_curve(res: dict, ref: tuple[float, float]) -> list[float]:
    """Hypervolume of the search's running front after each trial, in full-k currency."""
    by_number = {t["number"]: t for t in res["trials"]}
    curve = []
    for front in res["fronts"]:
        pts = [
            (by_number[n].get("consistency_full", by_number[n]["consistency"]), by_number[n]["perplexity"])
            for n in front
        ]
        curve.append(hypervolume(pts, ref))
    return curve


class GroundTruth:
    """Greedy accuracy on `size` problems of the lab's test split from `offset` on (skills
    interleaved: an even offset keeps them balanced), cached per lab in gt-<size>[@<offset>].json."""

    def __init__(self, lab: int, size: int, offset: int = 0):
        import torch

        from dots.lab.sampling import LocalEngine
        from dots.lab.tasks import test_problems
        from dots.search.pipeline import prepare
        from dots.search.steps import build_vectors
        from dots.vectors import ResidentSynthesizer

        self.lab, self.size = lab, size
        self.paths = lab_paths(lab)
        self.path = out_root() / f"lab{lab}" / (f"gt-{size}.json" if not offset else f"gt-{size}@{offset}.json")
        self.cache = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.problems = test_problems({"size": offset + size})[offset:]
        if len(self.problems) < size:
            raise ValueError(f"the lab's test split has {len(self.problems) + offset} problems, not {offset + size}")
        cfg = search_cfg(lab, self.paths, [f"run_dir={out_root() / f'lab{lab}' / 'selection'}"])
        self.tv = build_vectors(prepare(cfg))
        self.engine = LocalEngine(self.paths["base"])
        self.synth = ResidentSynthesizer(self.tv, device=torch.device("cpu"))

    def _score(self, key: str, load) -> dict:
        from dots.lab.score import accuracy

        if key not in self.cache:
            load()
            r = accuracy(self.engine, self.problems, n=1, temperature=0.0, max_tokens=32)
            self.cache[key] = {k: r[k] for k in ("all", "add", "sub")}
            write_json(self.path, self.cache)
        return self.cache[key]

    def merge(self, params: dict) -> dict:
        key = "lambda:" + ",".join(f"{s}={params[s]:.10f}" for s in self.tv.sources)
        return self._score(key, lambda: self.engine.swap_weights(self.synth(params)))

    def checkpoint(self, name: str, path: Path) -> dict:
        return self._score(f"model:{name}", lambda: self.engine.swap_checkpoint(path))


def classic_merges(lab: int, paths: dict[str, Path]) -> dict[str, Path]:
    from dots.merge.__main__ import run_from_config
    from dots.options.compose import compose

    out = {}
    for name, overrides in METHODS.items():
        dest = out_root() / f"lab{lab}" / "merged" / name
        if not (dest / "config.json").exists():
            cfg = compose(
                "merge",
                [
                    *overrides,
                    f"backbone.base={paths['base']}",
                    f"backbone.sources.sft={paths['sft']}",
                    f"backbone.sources.rlvr={paths['rlvr']}",
                    f"output={dest}",
                    "overwrite=true",
                    "device=cpu",
                ],
            )
            run_from_config(cfg)
        out[name] = dest
    return out


def fallbacks(result_path: Path) -> int:
    """Complete trials of a study whose point was the random fallback of dots.search.study.trials (a
    sampler that kept proposing scored points): enqueued trials, in a study that enqueues nothing else."""
    import optuna
    from optuna.trial import TrialState

    study = optuna.load_study(study_name="lab-samplers", storage=f"sqlite:///{result_path.parent / 'study.db'}")
    return sum(
        "fixed_params" in t.system_attrs for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    )


def first_reach(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v >= target - 1e-15), None)


def percent(values: Sequence[float]) -> list[float]:
    """Accuracies (fractions of 1) in %, as every report prints them (differences: in points)."""
    return [100 * v for v in values]


def spread(values: Sequence[float], fmt: str = "{:.1f}") -> str:
    """median [min–max] over seeds."""
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}–{fmt.format(max(values))}]"
