"""Samplers × adaptive sampling on several labs, against the labs' ground truth (#20 part 4).

For each lab (a trio built by `python -m dots.lab seed=L`), each sampler of the registry
(tpe, gp, nsga2, random) with and without adaptive sampling, and each search seed, this runs
dots' own study — `dots.search.study.storage.open_study` / `dots.search.study.trials.run_study`,
the sampler registry, the `Scorer` (consistency of k samples per query, adaptive rounds,
perplexity of the prompts) and the pick of `dots.search.pick.pareto` — on the lab's
difficulty-aware selection (dots' `build_selection`, one per lab, `selection.seed` 0, n = 64).
What differs from `python -m dots.search backbone=lab`: the engine. Trials generate with the lab's KV-cached
batched sampler (`dots.lab.sampling.LocalEngine`) into which θ0 + Σλτ̃ is swapped by dots'
`ResidentSynthesizer`, instead of transformers' `generate` (~35–48 s per trial on the loaded
2-core machine against ~2.5 s here). Sampling draws differ from the HF engine's (another
sampler and RNG), the scoring code is the same.

    python -m benchmarks.pick samplers run &   # the studies (resumable; several processes
    python -m benchmarks.pick samplers run &   #  share the jobs, one per core)
    python -m benchmarks.pick samplers report                         # ground truth, tables, figures

Results go to outputs/bench/lab_samplers/ (per study: study.db and result.json, written
when the study ends; a killed run resumes from its study.db). `report` scores the picks, the
sources, a 5×5 grid of fixed λ and the classic merges on the lab's test split (greedy,
`--test-size` problems, half per skill; cached in gt.json per lab), writes
results.md / results.json and one figure per lab (hypervolume against trials and tokens).

Hypervolume: the 2-objective front (consistency ↑, perplexity ↓) of the trials so far, against
a reference point fixed per lab: the worse of the two source checkpoints on each objective
(min C, max PPL), both scored by the same scorer (k = 8, no adaptive sampling, seed 0) on the
lab's selection. The area counts only merges that beat the worse source on both objectives.
Adaptive sampling's consistency is measured on fewer samples and is biased upward (a query
stops early when its first answers agree), so for the hypervolume of an adaptive study every
trial that was ever on its running front is scored again with all k samples (same λ, the trial's
seed); the front itself is the one the search saw. Those re-scores are analysis, not search:
their tokens are not counted.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Sequence

from benchmarks.harness.lab import Lab, claim, lab_paths, parse_lab_overrides, study_parser
from benchmarks.pick.samplers_report import cmd_report
from benchmarks.pick.samplers_study import MemoScorer, config_name, import_study, jobs, run_job, study_dir

log = logging.getLogger("lab_samplers")


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    todo = jobs(args.labs, args.seeds, args.trials_ref, args.trials_other)
    labs: dict[int, Lab] = {}
    while True:  # any number of these processes share the jobs: each claims one by a file lock
        pending = [j for j in todo if not (study_dir(j) / "result.json").exists()]
        if not pending:
            break
        ready = [j for j in pending if j["lab"] in labs or lab_paths(j["lab"]) is not None]
        job, lock = claim(ready, study_dir)
        if job is None:
            log.info("nothing to claim (labs being built or studies held by other workers); waiting")
            time.sleep(20)
            continue
        try:
            if job["lab"] not in labs:
                labs[job["lab"]] = lab = Lab(job["lab"])
                for done in sorted(lab.dir.glob("*/seed*/result.json")):  # studies scored before the memo
                    mode = done.parent.parent.name.split("-")[1]
                    memo = MemoScorer(None, lab.dir / f"memo-{mode}.jsonl")
                    import_study(done.parent / "study.db", memo, int(done.parent.name[4:]), list(lab.tv.sources))
            t0 = time.perf_counter()
            res = run_job(labs[job["lab"]], job)
            log.info(
                "lab %d %s seed %d: %d trials in %.0f s",
                job["lab"],
                config_name(job["sampler"], job["adaptive"]),
                job["seed"],
                len(res["trials"]),
                time.perf_counter() - t0,
            )
        finally:
            lock.close()


def main(argv: Sequence[str] | None = None) -> None:
    p, sub = study_parser(__doc__)
    r = sub.add_parser("run", help="run the studies (resumable)")
    r.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--trials-ref", type=int, default=50, help="trials of the tpe studies (the reference)")
    r.add_argument("--trials-other", type=int, default=25, help="trials of the gp / nsga2 / random studies")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--lab-overrides", nargs="*", default=[], help="LAB:key=value,... e.g. 2:threads=1")
    q = sub.add_parser("report", help="ground truth, tables and figures from the finished studies")
    q.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2])
    q.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--lab-overrides", nargs="*", default=[], help="LAB:key=value,... e.g. 2:threads=1")
    args = p.parse_args(argv)
    parse_lab_overrides(args.lab_overrides)
    {"run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
