"""Byte identity of two versions of dots: same merges, same search, same export, same caches.

    python -m benchmarks.versions bytes [--before c7d346d] [--after HEAD] [--trials 6]

Each ref is checked out with `git worktree add` into a temporary directory and run from
there (PYTHONPATH set to it; outputs and caches in a directory of its own): every merge
method of `dots/conf/method/` through `python -m dots.merge` on the shipped lab trio, and
one seeded short lab search (`python -m dots.search`, engine=hf, `--trials` trials, small
selection) with its export. Compared by sha256: every merged `model.safetensors`, the
exported safetensors and every safetensors file of the τ̃ and Fisher caches; by value: every
column of the search's `trials.csv` both versions write (time columns aside) and every key of
its `result.yaml` both write — a column or key only the newer version writes is listed as
new, not counted as a difference. Prints one line per
item (same / DIFFERENT) and exits 1 on any difference. `--quick` checks only the writers (merges
of the cheap methods, a sharded checkpoint, the τ̃ cache, the Fisher file format) in seconds.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEARCH = [  # a short, seeded lab search: minutes on two cores
    "backbone=lab",
    "engine=hf",
    "engine.device=cpu",
    "selection.n=8",
    "selection.m=2",
    "search.n_startup_trials=3",
    "search.k=2",
    "export.device=cpu",
    "seed=0",
]


# --quick: in one process, the writers alone (seconds): merges of the lab trio by the cheap methods,
# a sharded checkpoint, the τ̃ cache and a file in the Fisher cache's format (no Fisher pass)
QUICK = """import hashlib, json, sys
from pathlib import Path
import torch

out = Path(sys.argv[1]); out.mkdir(parents=True)
from dots.paths import DATA_DIR
from dots.merge.executor import merge_checkpoints
from dots.io.checkpoint import Checkpoint
from dots.vectors.cache import build_task_vectors
from dots.vectors.sparsify import SparsifyConfig
lab = DATA_DIR / "lab"
base = next(lab.glob("base-*")); sft = next(lab.glob("sft-*")); rlvr = next(lab.glob("rlvr-*"))
res = {}
for m in ["ties", "linear", "task_arithmetic", "dare", "ram", "dots_fixed"]:
    d = merge_checkpoints(base, {"sft": sft, "rlvr": rlvr}, out / m, method=m, cache_dir=out / "cache")
    res[f"merge {m}"] = hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
# a sharded CheckpointWriter output (several shards + index)
d = merge_checkpoints(base, {"sft": sft, "rlvr": rlvr}, out / "sharded", method="ties", max_shard_bytes=300_000)
for f in sorted(d.glob("model*")):
    res[f"sharded {f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()
sources = {"sft": Checkpoint(sft), "rlvr": Checkpoint(rlvr)}
tv = build_task_vectors(Checkpoint(base), sources, SparsifyConfig(), out / "tcache")
files = (out / "tcache").rglob("*.safetensors")
for i, h in enumerate(sorted(hashlib.sha256(f.read_bytes()).hexdigest() for f in files)):
    res[f"tau cache file {i}"] = h
g = torch.Generator().manual_seed(0)
tensors = {
    "a.weight": torch.randn(7, 5, generator=g),
    "b": torch.randn(3, generator=g).to(torch.bfloat16),
    "c": torch.arange(6, dtype=torch.int32).reshape(2, 3),
}
try:
    from dots.io.safetensors import write_file
except ImportError:
    from dots.merge.fisher import write_safetensors as write_file
write_file(tensors, out / "fisher.safetensors", {"model": "m", "examples": "3"})
res["fisher-format file"] = hashlib.sha256((out / "fisher.safetensors").read_bytes()).hexdigest()
print(json.dumps(res))
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def trials_without_times(path: Path, columns: list[str] | None = None) -> str:
    """trials.csv with its time columns (time_*) dropped (and only `columns`, when given), as text."""
    rows = list(csv.DictReader(path.open()))
    keep = [k for k in (rows[0] if rows else {}) if not k.startswith("time_") and (columns is None or k in columns)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keep, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def compare_search(before: Path, after: Path) -> tuple[dict[str, bool], list[str]]:
    """The search outputs by value: trials.csv on the columns both write, result.yaml on the
    keys both write; and what only the newer version writes."""
    import yaml

    cols = [list(csv.DictReader(p.open()).fieldnames or []) for p in (before / "trials.csv", after / "trials.csv")]
    shared = [c for c in cols[0] if c in cols[1]]
    results = [yaml.safe_load((p / "result.yaml").read_text()) for p in (before, after)]
    keys = [k for k in results[0] if k in results[1]]
    same = {
        "search: trials.csv, shared columns, no time": trials_without_times(before / "trials.csv", shared)
        == trials_without_times(after / "trials.csv", shared),
        "search: result.yaml, shared keys": all(results[0][k] == results[1][k] for k in keys),
    }
    new = [f"trials.csv column {c}" for c in cols[1] if c not in cols[0]]
    new += [f"result.yaml key {k}" for k in results[1] if k not in results[0]]
    return same, new


def run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)} — see {log}")


def produce(ref: str, label: str, work: Path, methods: list[str], trials: int, quick: bool = False) -> dict[str, str]:
    """Run every merge and the search at `ref`; name → digest (or text) of each output."""
    tree, out = work / "src", work / "run"  # the same paths for both refs: paths recorded in files match
    git = ["git", "-C", str(REPO), "worktree"]
    subprocess.run([*git, "add", "--detach", str(tree), ref], check=True, capture_output=True)
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "DOTS_OUTPUTS": str(out / "outputs"),
        "DOTS_CACHE": str(out / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    log = out / "log.txt"
    digests: dict[str, str] = {}
    try:
        if quick:
            done = subprocess.run(
                [sys.executable, "-c", QUICK, str(out / "quick")], cwd=out, env=env, capture_output=True, text=True
            )
            log.write_text(done.stderr)
            if done.returncode != 0:
                raise SystemExit(f"--quick failed at {ref}: see {log}")
            return json.loads(done.stdout.splitlines()[-1])
        for method in methods:
            start = time.time()
            target = out / "merge" / method
            cmd = [sys.executable, "-m", "dots.merge", f"method={method}", f"output={target}", "device=cpu"]
            run(cmd, out, env, log)
            digests[f"merge {method}: model.safetensors"] = sha256(target / "model.safetensors")
            print(f"  {label} merge {method}: {time.time() - start:.0f} s", flush=True)
        if trials > 0:
            start = time.time()
            run_dir = out / "search"
            cmd = [sys.executable, "-m", "dots.search", *SEARCH, f"search.n_trials={trials}", f"run_dir={run_dir}"]
            run(cmd, out, env, log)
            print(f"  {label} search: {time.time() - start:.0f} s", flush=True)
            for f in sorted((run_dir / "model").glob("*.safetensors")):
                digests[f"export: {f.name}"] = sha256(f)
        # cache entries are named by keys that include file times: compared by content, per kind
        for kind in sorted(d.name for d in (out / "cache").iterdir() if d.is_dir()):
            files = sorted(sha256(f) for f in (out / "cache" / kind).rglob("*.safetensors"))
            for i, digest in enumerate(files):
                digests[f"cache: {kind} file {i + 1} of {len(files)} (by content)"] = digest
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)], capture_output=True)
        out.rename(work / label)
    return digests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="c7d346d")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--trials", type=int, default=6, help="0: no search")
    parser.add_argument("--methods", nargs="*", help="default: every dots/conf/method/*.yaml of --after")
    parser.add_argument("--quick", action="store_true", help="the writers alone, in-process (seconds)")
    parser.add_argument("--keep", help="a directory to keep the outputs in (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    methods = args.methods
    if not methods:
        listing = subprocess.run(
            ["git", "-C", str(REPO), "ls-tree", "--name-only", f"{args.after}:dots/conf/method"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        methods = sorted(Path(n).stem for n in listing if n.endswith(".yaml"))
    with tempfile.TemporaryDirectory(prefix="dots-identity-") as tmp:
        work = Path(args.keep).resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        before = produce(args.before, "before", work, methods, args.trials, args.quick)
        after = produce(args.after, "after", work, methods, args.trials, args.quick)
        searched = args.trials > 0 and not args.quick
        by_value, new = compare_search(work / "before" / "search", work / "after" / "search") if searched else ({}, [])
    differences = 0
    for name in sorted(before.keys() | after.keys()):
        same = before.get(name) is not None and before.get(name) == after.get(name)
        differences += not same
        print(f"{'same' if same else 'DIFFERENT':9} {name}  {(after.get(name) or before.get(name) or '')[:16]}")
    for name, same in by_value.items():
        differences += not same
        print(f"{'same' if same else 'DIFFERENT':9} {name}  (by value)")
    for what in new:
        print(f"new       {what} (written by {args.after} only)")
    print(f"{args.before} vs {args.after}: {len(before) + len(by_value)} items, {differences} different")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
