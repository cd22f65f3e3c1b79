"""dots' grader against the graders the field uses, on the same (completion, gold) pairs.

    python benchmarks/graders_vs_peers.py --record --machine '...'
    python benchmarks/graders_vs_peers.py --no-peers --baseline-ref REF --lab-problems 0   # before/after

Pairs, each with a truth (whether the completion answers the gold):
- `renderings`: every gold of dots/data/math/valid.all.dedup.parquet written the ways
  models write it, and perturbed (tests/gold_renderings.py);
- `handwritten`: reasoning-model completions written by hand (tests/grading_cases.py);
- `lab`: completions sampled from the shipped lab trio (dots/data/lab; 2-digit arithmetic
  answered with `\\boxed{}`), truth from the lab's own exact integer check.

Graders: dots (`dots.scoring.is_correct`, this checkout); `dots@REF` (`--baseline-ref`, the
scoring code of another commit, from `git archive`); and the peers, installed from PyPI
in venvs of their own under `--venvs` (never dependencies of dots), run by this file in
worker mode inside each venv:
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
`--record` appends the tables to benchmarks/RESULTS.md; `--out` gets every verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
VENVS = {
    "mv-lmeval": {"packages": ["math-verify", "lm-eval[math]"], "system_site": False},
    "verl": {"packages": ["verl"], "system_site": True},
}
PEERS = {
    "math_verify": "mv-lmeval",
    "lm_eval_minerva": "mv-lmeval",
    "verl_math_reward": "verl",
    "verl_math_dapo": "verl",
    "verl_prime_math": "verl",
    "verl_math_verify": "verl",
}
VERSIONS_OF = ["math-verify", "latex2sympy2_extended", "lm_eval", "verl", "sympy", "antlr4-python3-runtime"]
PEER_TIMEOUT_S = 30

# --- worker mode: runs inside a peer venv (or with an archived dots on PYTHONPATH) -------


class _PeerTimeout(BaseException):
    pass


def _peer(name: str):
    """The verdict function (completion, gold) -> bool of one peer grader."""
    if name == "math_verify":
        from math_verify import parse, verify

        return lambda c, g: verify(parse(g), parse(c))
    if name == "lm_eval_minerva":
        from lm_eval.tasks.minerva_math import utils as u

        def minerva(c, g):
            ans = u.get_unnormalized_answer(c)
            if ans == "[invalidanswer]":
                box = u.last_boxed_only_string(c)
                if box is None:
                    return False
                ans = u.remove_boxed(box)
            gbox = u.last_boxed_only_string(g)
            gold = u.remove_boxed(gbox) if gbox else g
            return u.is_equiv(u.normalize_final_answer(ans), u.normalize_final_answer(gold))

        return minerva
    if name.startswith("verl_"):
        import importlib

        mod = importlib.import_module("verl.utils.reward_score." + name[len("verl_") :])
        if name == "verl_math_dapo":
            return lambda c, g: mod.compute_score(c, g)["acc"]
        if name == "verl_prime_math":
            return lambda c, g: mod.compute_score(c, g)[0]
        return lambda c, g: mod.compute_score(c, g) == 1.0
    if name == "dots":  # whichever dots is first on PYTHONPATH (--baseline-ref)
        from dots.scoring import is_correct

        return is_correct
    raise ValueError(name)


def worker(names: list[str], pairs_path: str, out_path: str) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    pairs = [json.loads(line) for line in open(pairs_path)]

    def on_alarm(signum, frame):
        raise _PeerTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "w") as out:
        for name in names:
            fn = _peer(name)
            start = time.monotonic()
            verdicts = []
            for p in pairs:
                signal.alarm(PEER_TIMEOUT_S)
                try:
                    verdicts.append(bool(fn(p["completion"], p["gold"])))
                except (Exception, _PeerTimeout):
                    verdicts.append(None)
                finally:
                    signal.alarm(0)
            seconds = time.monotonic() - start
            out.write(json.dumps({"grader": name, "verdicts": verdicts, "seconds": seconds}) + "\n")
            out.flush()


# --- setting up the peers -------------------------------------------------------------


def setup_venv(root: Path, name: str, reinstall: bool) -> dict:
    spec = VENVS[name]
    path = root / name
    py = path / "bin" / "python"
    log = root / f"{name}.pip.log"
    info: dict = {"venv": str(path), "packages": spec["packages"], "log": str(log)}
    marker = path / ".dots-installed"
    if reinstall or not marker.exists():
        root.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        cmd = [sys.executable, "-m", "venv", str(path)] + (["--system-site-packages"] if spec["system_site"] else [])
        subprocess.run(cmd, check=True)
        with open(log, "w") as fh:
            rc = subprocess.run(
                [str(py), "-m", "pip", "install", *spec["packages"]], stdout=fh, stderr=subprocess.STDOUT
            ).returncode
        info["install_seconds"] = round(time.monotonic() - start, 1)
        info["pip_rc"] = rc
        if rc == 0:
            marker.write_text("ok\n")
    else:
        info["pip_rc"] = 0
    if info["pip_rc"] != 0:
        info["error"] = "pip install failed: " + " | ".join(log.read_text().strip().splitlines()[-5:])
        return info
    freeze = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True).stdout
    wanted = {v.lower().replace("_", "-") for v in VERSIONS_OF}
    info["versions"] = {
        p["name"]: p["version"] for p in json.loads(freeze or "[]") if p["name"].lower().replace("_", "-") in wanted
    }
    return info


def run_worker(python: str, names: list[str], pairs_path: Path, env: dict | None = None) -> dict:
    out = pairs_path.with_name(f"verdicts-{'-'.join(names)}.jsonl")
    cmd = [python, str(Path(__file__).resolve()), "--worker", ",".join(names), str(pairs_path), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    got = {}
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            got[row["grader"]] = row
    for name in names:
        if name not in got:
            got[name] = {"grader": name, "error": f"worker rc {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return got


def baseline_tree(ref: str, root: Path) -> Path:
    """dots/__init__.py, dots/errors.py and dots/scoring of commit `ref`, for `dots@ref`."""
    dest = root / f"dots-{ref}"
    if not (dest / "dots" / "scoring").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", ref, "dots/__init__.py", "dots/errors.py", "dots/scoring"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


# --- pairs ----------------------------------------------------------------------------


def lab_pairs(problems: int, samples: int) -> list[dict]:
    from dots.lab import tasks
    from dots.lab.sampling import LocalEngine

    recs = tasks.test_problems({"size": problems})
    out = []
    for model in sorted((REPO / "dots" / "data" / "lab").glob("*-*")):
        engine = LocalEngine(model, threads=1)
        gens = engine.generate([r["question"] for r in recs], n=samples, temperature=0.6, max_tokens=32, seed=0)
        for rec, comps in zip(recs, gens):
            for c in comps:
                truth = tasks.extract_answer(c) == int(rec["answer"])
                out.append(
                    {
                        "set": "lab",
                        "kind": model.name.split("-")[0],
                        "completion": c,
                        "gold": rec["answer"],
                        "truth": truth,
                        "source": rec["id"],
                    }
                )
    return out


def build_pairs(args) -> list[dict]:
    sys.path.insert(0, str(REPO / "tests"))
    from gold_renderings import renderings
    from grading_cases import CASES

    pairs = [
        {
            "set": "renderings",
            "kind": r.kind,
            "source": r.source,
            "completion": r.completion,
            "gold": r.gold,
            "truth": r.expect,
        }
        for r in renderings()
    ]
    pairs += [
        {
            "set": "handwritten",
            "kind": c.group,
            "source": c.note,
            "completion": c.completion,
            "gold": c.gold,
            "truth": c.truth,
        }
        for c in CASES
    ]
    if args.lab_problems:
        pairs += lab_pairs(args.lab_problems, args.lab_samples)
    if args.limit:
        pairs = pairs[:: max(1, len(pairs) // args.limit)]
    return pairs


# --- timing ---------------------------------------------------------------------------

ADVERSARIAL = [
    ("9^{9^{9^{9}}}", "9^{9^{9^{8}}}"),
    ("(10^{9})!", "1"),
    ("2^{2^{32}} \\cdot 3", "2^{2^{32}}"),
    ("\\binom{10^{9}}{5 \\cdot 10^{8}}", "1"),
    ("7^{7^{7^{7}}} - 7^{7^{7^{7}}}", "0"),
]


def timing(pairs: list[dict], trials: int) -> dict:
    import random
    import statistics

    from dots.scoring import answers_equivalent, consistency
    from dots.scoring.equivalence import helper, verified_equal
    from dots.scoring.numbers import read_number
    from dots.scoring.worker import COMPARE_TIMEOUT_S

    def cold() -> None:  # no answer cached: a fresh helper, started outside the timed part
        verified_equal.cache_clear()
        helper.close()
        answers_equivalent("y+1", "1+y")

    cold()
    adv = []
    for a, b in ADVERSARIAL:
        start = time.monotonic()
        verdict = answers_equivalent(a, b)
        adv.append({"a": a, "b": b, "equivalent": verdict, "seconds": round(time.monotonic() - start, 2)})
    # 64 queries x 8 samples: each query's samples mix the renderings of one gold (the same
    # answer in different forms), its perturbation and a truncated sample, as a trial's do
    by_gold: dict[str, list[str]] = defaultdict(list)
    for p in pairs:
        if p["set"] == "renderings":
            by_gold[p["gold"]].append(p["completion"])
    out: dict = {"compare_timeout_s": COMPARE_TIMEOUT_S, "adversarial": adv}
    by_problem: dict[str, list[str]] = defaultdict(list)  # lab: the trio's samples of one problem
    for p in pairs:
        if p["set"] == "lab":
            by_problem[p["source"]].append(p["completion"])
    variants = {
        "all golds": (by_gold, sorted(by_gold)),
        "symbolic golds": (by_gold, sorted(g for g in by_gold if read_number(g) is None)),
        "lab completions": (by_problem, sorted(by_problem)),
    }
    for variant, (pools, keys) in variants.items():
        if len(keys) < 64:
            continue
        per_trial = []
        for t in range(trials):
            rng = random.Random(t)
            queries = []
            for key in rng.sample(keys, 64):
                pool = pools[key] + (["<think>Let me see. First I compute the area, which"] if pools is by_gold else [])
                queries.append([rng.choice(pool) for _ in range(8)])
            cold()
            start = time.monotonic()
            for samples in queries:
                consistency(samples)
            per_trial.append(time.monotonic() - start)
        out[variant] = {
            "per_trial_s": [round(x, 3) for x in per_trial],
            "median_s": round(statistics.median(per_trial), 3),
        }
    return out


# --- report ---------------------------------------------------------------------------


def analyse(pairs: list[dict], verdicts: dict[str, list], peers: list[str]) -> dict:
    sets = ["renderings", "handwritten", "lab"]
    acc: dict = {}
    for g, vs in verdicts.items():
        acc[g] = {}
        for s in sets:
            idx = [i for i, p in enumerate(pairs) if p["set"] == s]
            if idx:
                acc[g][s] = sum(bool(vs[i]) == pairs[i]["truth"] for i in idx) / len(idx)
    majority = []
    for i in range(len(pairs)):
        yes = sum(bool(verdicts[g][i]) for g in peers)
        majority.append(True if yes * 2 > len(peers) else False if yes * 2 < len(peers) else None)
    rows: dict = defaultdict(lambda: {"pairs": 0, "differ": 0, "dots_right": 0, "tie": 0, "examples": []})
    for i, p in enumerate(pairs):
        row = rows[(p["set"], p["kind"])]
        row["pairs"] += 1
        if majority[i] is None:
            row["tie"] += 1
            continue
        if bool(verdicts["dots"][i]) != majority[i]:
            row["differ"] += 1
            row["dots_right"] += bool(verdicts["dots"][i]) == p["truth"]
            if len(row["examples"]) < 3:
                tail = p["completion"].rsplit("</think>", 1)[-1].strip()[-70:]
                row["examples"].append(f"gold `{p['gold']}` / `{tail}` → dots {bool(verdicts['dots'][i])}")
    if peers:  # without peers (--no-peers) there is no majority to compare with
        acc["peer majority"] = {
            s: sum(majority[i] == p["truth"] for i, p in enumerate(pairs) if p["set"] == s)
            / max(1, sum(p["set"] == s for p in pairs))
            for s in sets
            if any(p["set"] == s for p in pairs)
        }
    benchmarks = sorted({p["source"] for p in pairs if p["set"] == "renderings"})

    def share(g: str, keep) -> str:
        idx = [i for i, p in enumerate(pairs) if p["set"] == "renderings" and keep(p)]
        ok = sum(bool(verdicts[g][i]) == pairs[i]["truth"] for i in idx)
        return f"{ok}/{len(idx)} ({100 * ok / max(1, len(idx)):.1f}%)"

    per_benchmark = {
        g: {
            **{b: share(g, lambda p, b=b: p["source"] == b and p["truth"]) for b in benchmarks},
            "ALL": share(g, lambda p: p["truth"]),
            "sci": share(g, lambda p: p["kind"].startswith("sci_")),
            "pct": share(g, lambda p: p["kind"].startswith("pct_")),
            "spans": share(g, lambda p: p["kind"].startswith("spans_")),
            "perturbed": share(g, lambda p: not p["truth"]),
        }
        for g in verdicts
    }
    return {
        "accuracy": acc,
        "benchmarks": benchmarks + ["ALL"],
        "per_benchmark": per_benchmark,
        "disagreements": {f"{k[0]}/{k[1]}": v for k, v in sorted(rows.items())},
    }


def markdown(result: dict) -> str:
    acc = result["analysis"]["accuracy"]
    sets = [s for s in ("renderings", "handwritten", "lab") if s in next(iter(acc.values()))]
    counts = Counter(p["set"] for p in result["pairs"])
    lines = [
        "| grader | " + " | ".join(f"{s} ({counts[s]} pairs)" for s in sets) + " | seconds |",
        "|---|" + "---|" * (len(sets) + 1),
    ]
    for g, by in acc.items():
        secs = result["seconds"].get(g)
        lines.append(
            f"| {g} | " + " | ".join(f"{100 * by[s]:.1f}%" for s in sets) + f" | {secs if secs is not None else ''} |"
        )
    bench = result["analysis"]["benchmarks"]
    lines += ["", "Gold renderings per benchmark: share graded correct (perturbed: share graded wrong).", ""]
    lines += ["| grader | " + " | ".join(bench) + " | sci-notation rows | percent rows | multi-span rows | perturbed |"]
    lines += ["|---|" + "---|" * (len(bench) + 4)]
    for g, by in result["analysis"]["per_benchmark"].items():
        cells = [by[b] for b in bench] + [by["sci"], by["pct"], by["spans"], by["perturbed"]]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    if "peer majority" not in acc:
        return "\n".join(lines)
    lines += [
        "",
        "| set/kind | pairs | dots ≠ peer majority | of which dots is right | peers tied | examples |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in result["analysis"]["disagreements"].items():
        lines.append(
            f"| {key} | {row['pairs']} | {row['differ']} | {row['dots_right']} | {row['tie']} | "
            + "; ".join(e.replace("|", "\\|").replace("\n", " ") for e in row["examples"])
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=3, metavar=("NAMES", "PAIRS", "OUT"), help=argparse.SUPPRESS)
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
    if args.worker:
        names, pairs_path, out = args.worker
        return worker(names.split(","), pairs_path, out)

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
        "command": sys.argv,
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


def record(args, result: dict, report: dict | str) -> None:
    t = result.get("timing")
    venvs = "; ".join(f"{k}: {v.get('versions') or v.get('error')}" for k, v in result["info"]["venvs"].items())
    text = [
        f"\n## Grading vs peer graders (benchmarks/graders_vs_peers.py) — {result['date']}\n",
        f"Command: `python {' '.join(shlex.quote(a) for a in result['command'])}`",
        "dots: this checkout's `dots.scoring`; dots@REF: the scoring code of commit REF (the figures before a "
        "change). Why dots differs from the peers where it does: docs/grading.md, section Validation.",
        f"Machine: {args.machine or 'not given'}. Peers: {venvs}.",
        f"Errors: {result['info']['errors'] or 'none'}.\n",
        "Share of pairs each grader grades as the truth does (renderings: every parquet gold in each form, "
        "and perturbed; handwritten: tests/grading_cases.py; lab: the lab trio's sampled completions), "
        "then where dots differs from the strict majority of the peers:\n",
        str(report),
    ]
    if t:
        adv = ", ".join(f"`{a['a']}` vs `{a['b']}` {a['seconds']} s" for a in t["adversarial"])
        text.append(f"\nAdversarial comparisons (per-comparison limit {t['compare_timeout_s']} s): {adv}.")
        for variant in ("all golds", "symbolic golds", "lab completions"):
            if variant not in t:
                continue
            v = t[variant]
            text.append(
                f"consistency, 64 queries x 8 samples ({variant}; caches cold), per trial: median "
                f"{v['median_s']} s (trials {v['per_trial_s']})."
            )
    with open(RESULTS, "a") as fh:
        fh.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
