"""The report of benchmarks/grading/peers.py: each grader's share of pairs graded as the truth
does, per set and per benchmark, where dots differs from the peers' majority, and the
RESULTS.md section."""

from __future__ import annotations

from collections import Counter, defaultdict

from benchmarks.harness.results import append


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


def record(args, result: dict, report: dict | str) -> None:
    t = result.get("timing")
    venvs = "; ".join(f"{k}: {v.get('versions') or v.get('error')}" for k, v in result["info"]["venvs"].items())
    text = [
        f"\n## Grading vs peer graders (benchmarks/grading/peers.py) — {result['date']}\n",
        f"Command: `{result['command']}`",
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
    append("\n".join(text) + "\n", "grading")
