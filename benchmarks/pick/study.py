"""Five labs: what the search's cost levers keep (#30) and why the label-free pick fails, with
remedies (#31), against each lab's ground truth.

Every study runs dots' own search pieces on a lab (a trio of `python -m dots.lab seed=L`), as
`benchmarks/pick/samplers.py` does (its `Lab`: dots' selection, n = 64 queries; the `Scorer`,
k = 8; `open_study` / `run_study`; the lab's batched sampler as the engine). Configurations:

    tpe           the defaults before this study (sampler=tpe, λ ∈ [0, 2], one generation call per
                  trial, no stopping); every configuration searches [0, 2] unless it says otherwise
    gp            sampler=gp
    tpe-adaptive  search.adaptive.enabled=true
    tpe-b16       search.batch=16 (the blocks pruning needs; first search seed only: the control
                  for pruning's identity)
    tpe-prune     search.prune=true search.batch=16 (exact dominance pruning, for real)
    tpe-range     search.range=[0.5,2.0] (the official code's range)
    tpe-range-prune, tpe-range-prune32
                  the range with pruning in blocks of 16 or 32 queries (the candidate defaults)
    tpe-range-adaptive  the range with adaptive sampling

Stopping (`search.stop`) is replayed on each finished study with dots' own rule
(`dots.search.study.stopping.relative_gain`): a study that stops after trial t has exactly the first t
trials of the study that did not stop. Pick rules are applied to each study's trials after the
fact: `max_consistency` (the lab's rule), `agreement` (on the front, the point whose majority
answers agree most with the sources' majority answers from the selection; ties → C),
`consensus` (the same, counted only on the queries where the two sources agree), `guarded`
(max_consistency, unless the pick agrees with the sources less than they agree with each other —
the warning of dots.search.pick.diagnosis — then `agreement`), `away` (the front of the trials with
every λ ≥ 0.5). The `grid` job scores a 5×5 λ grid with the full scorer (seed 0) for the
per-lab analysis: how C, PPL and source agreement rank the grid against its ground truth.

    python -m benchmarks.pick study all        # labs 1–4 built, 205 studies, the report: ~75 min on 2 cores
    python -m benchmarks.pick study run &      # or by hand: one per core; resumable
    python -m benchmarks.pick study report     # → outputs/bench/lab_study/

Labs other than 0 are looked up with `threads=1` (how they are built here: `python -m dots.lab
seed=L threads=1 eval.enabled=false`); `--lab-overrides` changes that.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Sequence

from benchmarks.harness.entry import module_command
from benchmarks.harness.lab import LAB_OVERRIDES, lab_paths, parse_lab_overrides, study_parser, work_through
from benchmarks.pick.study_report import cmd_report
from benchmarks.pick.study_runs import job_dir, jobs, run_grid_job, run_study_job

log = logging.getLogger("lab_study")


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")

    def run(lab: Any, job: dict) -> None:
        (run_grid_job if job["kind"] == "grid" else run_study_job)(lab, job)

    def finished(job: dict) -> bool:
        return (job_dir(job) / "result.json").exists()

    work_through(jobs(args.labs, args.seeds, args.trials), finished, job_dir, run, log)


def cmd_all(args: argparse.Namespace) -> None:
    """The whole study in one command: build the missing labs, run the jobs with one process per
    worker, then the report."""
    import subprocess

    def together(commands: list[list[str]]) -> None:
        for i in range(0, len(commands), args.workers):
            procs = [subprocess.Popen(c) for c in commands[i : i + args.workers]]
            if any(p.wait() for p in procs):
                raise SystemExit("a step of the study failed (its output is above)")

    missing = [lab for lab in args.labs if lab_paths(lab) is None]
    together([[sys.executable, "-m", "dots.lab", f"seed={lab}", *LAB_OVERRIDES.get(lab, []), "eval.enabled=false"]
              for lab in missing])  # fmt: skip
    overrides = [f"{lab}:{','.join(keys)}" for lab, keys in LAB_OVERRIDES.items()]
    labs, seeds = map(str, args.labs), map(str, args.seeds)
    run = module_command("benchmarks.pick.study", "run", "--labs", *labs, "--seeds", *seeds,
                         "--trials", str(args.trials), "--lab-overrides", *overrides)  # fmt: skip
    together([run] * args.workers)
    cmd_report(args)


def main(argv: Sequence[str] | None = None) -> None:
    p, sub = study_parser(__doc__)
    r = sub.add_parser("run", help="run the grid and the studies (resumable; one process per core)")
    r.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--trials", type=int, default=50)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    q = sub.add_parser("report", help="ground truth, tables and figures from the finished jobs")
    q.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    q.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    a = sub.add_parser("all", help="build the missing labs, run every job (--workers processes), report")
    a.add_argument("--labs", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    a.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    a.add_argument("--trials", type=int, default=50)
    a.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1))
    a.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
    a.add_argument("--threads", type=int, default=1)
    a.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L > 0)")
    args = p.parse_args(argv)
    parse_lab_overrides(
        args.lab_overrides if args.lab_overrides is not None else [f"{lab}:threads=1" for lab in args.labs if lab]
    )
    {"run": cmd_run, "report": cmd_report, "all": cmd_all}[args.cmd](args)


if __name__ == "__main__":
    main()
