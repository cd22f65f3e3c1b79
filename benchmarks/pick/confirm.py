"""Beyond the grid (#42): the confirmation stage and the smoothed / agreement picks against each
lab's ground truth, paired with today's defaults.

Every job is one study with today's defaults on a lab (a trio of `python -m dots.lab seed=L`):
λ ∈ [0.5, 2], adaptive sampling, 50 trials with the hypervolume stop rule (W = 10, 1%), dots'
study loop and scorer on the lab's fast batched sampler (`benchmarks/harness/lab.py`'s
`Lab`, as `benchmarks/pick/study.py`). The optuna study is kept (study.db in the job's directory)
and every pick variant is applied to it with dots' own code (`benchmarks/pick/confirm_jobs.py`):

    today                    rank("max_consistency")[0]: the default pick until #42 (confirm-smoothed since)
    agreement, smoothed      rank(rule)[0]
    confirm-<rule>           the rule's top 3 re-scored with k = 8 fresh samples on the selection
                             (dots.search.steps.build_confirm: confirm_options, seeds seed +
                             CONFIRM_SEED + i), pick = confirmed_choice; rule ∈ max_consistency,
                             smoothed, agreement
    confirm-held-out         the same for max_consistency on 64 held-out pool queries
    confirm-proposal         confirm-smoothed's 3 and a 4th candidate no trial scored: the smoothed C's
                             maximum over a 31 × 31 grid of the range (#42's optional proposals)

`report` adds two picks from the stored rows (no tokens): pooled-<rule> (confirm-<rule>'s
candidates by the mean of the search's and the fresh C) and dots' knee rule; it scores every
pick, the 5×5 λ grid, the sources and every trial (the best trial each study holds) by greedy
accuracy on 1,024 test problems (cached per lab) and writes the tables
(`benchmarks/pick/confirm_report.py`). docs/lab.md "Beyond the grid" has the results.

    python -m benchmarks.pick confirm run &    # one per core; resumable; waits for labs being built
    python -m benchmarks.pick confirm run &
    python -m benchmarks.pick confirm report   # → outputs/bench/lab_confirm/{results.md,results.json}
    python -m benchmarks.pick confirm surrogate  # the surrogate's maximum as a pick; a finer grid at the top
    python -m benchmarks.pick confirm run --set search.seeds=common &  # a second set: common random numbers
    python -m benchmarks.pick confirm report --set search.seeds=common
    python -m benchmarks.pick confirm pooled --set search.seeds=common  # both sets' runs → pooled.md
    python -m benchmarks.pick confirm population  # C's maximum and its accuracy (every lab; --labs)
    python -m benchmarks.pick confirm heldout --set search.seeds=common  # a grid chosen on other labels

Labs other than 0 are looked up with `threads=1` (how they are built here: `python -m dots.lab
seed=L threads=1 eval.enabled=false`); `--lab-overrides` changes that. While no job is ready (labs
still building), a worker scores the ground truth of the finished jobs' picks instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Sequence

from benchmarks.harness.lab import lab_paths, parse_lab_overrides, try_lock, work_through
from benchmarks.pick.confirm_jobs import finished, job_dir, jobs, root

log = logging.getLogger("lab_confirm")
LABS = [0, 1, 2, 3, 4, 5, 6]


def truth_pass(labs: Sequence[int], test_size: int, block: bool) -> bool:
    """Ground truth of the sources, the grid and every finished job's picks, for the first lab
    whose truth lock is free (block: every lab, waiting for the lock); True if it scored any."""
    from benchmarks.pick.confirm_report import lab_truth

    did = False
    for lab in labs:
        if lab_paths(lab) is None or not (root() / f"lab{lab}").is_dir():
            continue
        lock = try_lock(root() / f"lab{lab}" / ".truth.lock") if not block else None
        if not block and lock is None:
            continue
        try:
            did = lab_truth(lab, test_size, lock_held=not block, limit=None if block else 2) or did
        finally:
            if lock is not None:
                lock.close()
        if did and not block:
            return True
    return did


def cmd_run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("DOTS_PROGRESS", "0")
    from benchmarks.pick.confirm_jobs import run_job

    def idle() -> bool:  # score ground truth while no job is ready
        return bool(args.truth) and truth_pass(args.labs, args.test_size, block=False)

    work_through(jobs(args.labs, args.seeds, args.trials), finished, job_dir, run_job, log, idle)


def cmd_status(args: argparse.Namespace) -> None:
    for j in jobs(args.labs, args.seeds, args.trials):
        path = job_dir(j) / "result.json"
        res = json.loads(path.read_text()) if path.exists() else {}
        print(j["lab"], j["seed"], "done" if finished(j) else ("study" if res else "—"),
              len(res.get("trials", [])), sorted(res.get("variants", {})))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    logging.getLogger("dots.search").setLevel(logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, text in (("run", "run the studies and the pick variants (resumable; one process per core)"),
                       ("report", "ground truth, tables → outputs/bench/lab_confirm/"),
                       ("status", "one line per job"),
                       ("surrogate", "the smoothed C's maximum as a pick; a finer grid at the top"),
                       ("pooled", "report's tables over today's studies and --set's together"),
                       ("population", "the mean C of a λ grid (16 scorings each) beside its accuracy"),
                       ("heldout", "the picks against a grid that chooses its cell on other labels")):  # fmt: skip
        q = sub.add_parser(name, help=text)
        q.add_argument("--labs", type=int, nargs="+", default=LABS)
        q.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
        q.add_argument("--trials", type=int, default=50)
        q.add_argument("--test-size", type=int, default=1024, help="test problems (half per skill), greedy")
        q.add_argument("--threads", type=int, default=1)
        q.add_argument("--truth", action=argparse.BooleanOptionalAction, default=True,
                       help="run: score ground truth while no job is ready")  # fmt: skip
        q.add_argument("--oracle", action=argparse.BooleanOptionalAction, default=True,
                       help="report: score every trial of every study (the best trial each holds)")  # fmt: skip
        q.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                       help="search overrides of today's defaults (results in lab_confirm/set-<hash>/)")  # fmt: skip
        q.add_argument("--lab-overrides", nargs="*", default=None, help="LAB:key=value,... (default: L:threads=1, L>0)")
    args = p.parse_args(argv)
    from benchmarks.pick import confirm_jobs as lab_confirm_jobs

    lab_confirm_jobs.SETTINGS[:] = args.set
    parse_lab_overrides(
        args.lab_overrides if args.lab_overrides is not None else [f"{lab}:threads=1" for lab in args.labs if lab]
    )
    if args.cmd == "report":
        from benchmarks.pick.confirm_report import cmd_report

        cmd_report(args)
    elif args.cmd == "pooled":
        from benchmarks.pick.confirm_report import cmd_pooled

        cmd_pooled(args)
    elif args.cmd == "heldout":
        from benchmarks.pick.confirm_heldout import cmd_heldout

        cmd_heldout(args)
    elif args.cmd in ("surrogate", "population"):
        import lab_confirm_surrogate

        getattr(lab_confirm_surrogate, f"cmd_{args.cmd}")(args)
    else:
        {"run": cmd_run, "status": cmd_status}[args.cmd](args)


if __name__ == "__main__":
    main()
