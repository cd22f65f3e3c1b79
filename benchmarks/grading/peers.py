"""dots' grader against the graders the field uses, on the same (completion, gold) pairs.

    python -m benchmarks.grading peers --record --machine '...'
    python -m benchmarks.grading peers --no-peers --baseline-ref REF --lab-problems 0   # before/after

Pairs, each with a truth (whether the completion answers the gold):
- `renderings`: every gold of dots/data/math/valid.all.dedup.parquet written the ways
  models write it, and perturbed (tests/gold_renderings.py);
- `handwritten`: reasoning-model completions written by hand (tests/grading_cases.py);
- `lab`: completions sampled from the shipped lab trio (dots/data/lab; 2-digit arithmetic
  answered with `\\boxed{}`), truth from the lab's own exact integer check.

Graders: dots (`dots.scoring.is_correct`, this checkout); `dots@REF` (`--baseline-ref`, the
scoring code of another commit, from `git archive`); and the peers, installed from PyPI
in venvs of their own under `--venvs` (never dependencies of dots), each run by
benchmarks/grading/worker.py inside its venv:
- venv `mv-lmeval` (`pip install math-verify lm-eval[math]`): `math_verify`
  (`verify(parse(gold), parse(completion))` on the raw strings) and `lm_eval_minerva`
  (lm-eval's Minerva-math answer: the "Final Answer: The final answer is X. I hope it is
  correct." phrase, else lm-eval's own last-box functions; `is_equiv` of both after
  `normalize_final_answer`, the gold normalised the same way);
- venv `verl` (`pip install verl` with `--system-site-packages`, reusing the system torch):
  verl's math scorers `math_reward` (Hendrycks string normalisation of the last box),
  `math_dapo` (default arguments: "Answer:" phrase, then the box), `prime_math` and
  `math_verify` (verl's math-verify wrapper). verl pins hydra-core, whose antlr4 4.9.3
  breaks lm-eval's Minerva checker (it asserts antlr4 4.11): hence two venvs.
A venv whose install fails is reported with pip's exit code and the tail of its log.
Each peer call runs under a 30 s alarm; an error or timeout is a "wrong" verdict.

Timing (`--timing`): dots' equivalence on adversarial LaTeX (sympy runs for minutes
without a limit), and `consistency` for 64 queries x 8 samples per trial (medians).
`--record` appends the tables to benchmarks/results/grading.md; `--out` gets every verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.grading.pairs import build_pairs, timing
from benchmarks.grading.report import analyse, markdown, record
from benchmarks.grading.venvs import PEERS, VENVS, baseline_tree, run_worker, setup_venv
from benchmarks.harness.results import REPO, command_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venvs", default=str(REPO / "outputs" / "bench-venvs" / "graders"))
    ap.add_argument("--reinstall", action="store_true")
    ap.add_argument("--baseline-ref", default=None, help="also grade with dots' scoring code of this commit")
    ap.add_argument("--lab-problems", type=int, default=64)
    ap.add_argument("--lab-samples", type=int, default=4)
    ap.add_argument("--limit", type=int, default=0, help="grade about this many pairs (0: all)")
    ap.add_argument("--timing", action="store_true", help="also time adversarial inputs and consistency 64x8")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "outputs" / "bench" / "graders_vs_peers.json"))
    ap.add_argument("--record", action="store_true")
    ap.add_argument(
        "--no-peers", action="store_true", help="grade with dots (and --baseline-ref) only: no peer venvs, no network"
    )
    ap.add_argument("--machine", default=None)
    args = ap.parse_args()
    root = Path(args.venvs)
    work = Path(args.out).with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    pairs = build_pairs(args)
    pairs_path = work / "pairs.jsonl"
    pairs_path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    print(f"{len(pairs)} pairs: {dict(Counter(p['set'] for p in pairs))}", flush=True)

    from dots.scoring import is_correct

    start = time.monotonic()
    verdicts: dict[str, list] = {"dots": [is_correct(p["completion"], p["gold"]) for p in pairs]}
    seconds = {"dots": round(time.monotonic() - start, 1)}
    info: dict = {"venvs": {}, "errors": {}}
    if args.baseline_ref:
        tree = baseline_tree(args.baseline_ref, work)
        env = dict(os.environ, PYTHONPATH=str(tree))
        got = run_worker(sys.executable, ["dots"], pairs_path, env)["dots"]
        if "verdicts" in got:
            verdicts[f"dots@{args.baseline_ref}"], seconds[f"dots@{args.baseline_ref}"] = (
                got["verdicts"],
                round(got["seconds"], 1),
            )
        else:
            info["errors"][f"dots@{args.baseline_ref}"] = got["error"]
    peers = []
    for venv in [] if args.no_peers else VENVS:
        setup = setup_venv(root, venv, args.reinstall)
        info["venvs"][venv] = setup
        names = [p for p, v in PEERS.items() if v == venv]
        if "error" in setup:
            for n in names:
                info["errors"][n] = setup["error"]
            continue
        print(f"running {names} in {venv}", flush=True)
        for name, got in run_worker(str(Path(setup["venv"]) / "bin" / "python"), names, pairs_path).items():
            if "verdicts" in got:
                verdicts[name], seconds[name] = got["verdicts"], round(got["seconds"], 1)
                peers.append(name)
            else:
                info["errors"][name] = got["error"]
    result = {
        "command": command_line(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": args.machine,
        "info": info,
        "seconds": seconds,
        "pairs": pairs,
        "verdicts": verdicts,
        "analysis": analyse(pairs, verdicts, peers)
        if peers or args.no_peers
        else {"accuracy": {}, "disagreements": {}},
    }
    if args.timing:
        result["timing"] = timing(pairs, args.trials)
    Path(args.out).write_text(json.dumps(result, indent=1))
    report = markdown(result) if peers or args.no_peers else "no peer grader ran: " + json.dumps(info["errors"])
    print(report)
    if "timing" in result:
        print(json.dumps(result["timing"], indent=1))
    if args.record:
        record(args, result, report)


if __name__ == "__main__":
    main()
