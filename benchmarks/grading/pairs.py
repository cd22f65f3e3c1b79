"""The pairs of benchmarks/grading/peers.py — gold renderings, handwritten cases and the lab
trio's sampled completions, each with its truth — and the timing of dots' equivalence on
adversarial LaTeX and of `consistency` for 64 queries × 8 samples."""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from benchmarks.harness.results import REPO


def lab_pairs(problems: int, samples: int) -> list[dict]:
    from dots.lab import tasks
    from dots.lab.sampling import LocalEngine
    from dots.scoring.sampling import Sampling

    recs = tasks.test_problems({"size": problems})
    out = []
    for model in sorted((REPO / "dots" / "data" / "lab").glob("*-*")):
        engine = LocalEngine(model, threads=1)
        gens = engine.generate(
            [r["question"] for r in recs], Sampling(n=samples, temperature=0.6, max_tokens=32, seed=0)
        )
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
