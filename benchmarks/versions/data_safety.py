"""The three data-loss reproductions of issue 25, against the dots found at CODE.

    python -m benchmarks.versions data-safety CODE WORKDIR

1. `python -m dots.merge … output=. overwrite=true` from a project directory;
2. `output=<the folder holding base/ sft/ rlvr/> overwrite=true`;
3. `python -m dots.search … export.dir=<a folder of other models>`.
One JSON line per case: exit code, the user's files lost (of those there), stderr's last
line, seconds. Run it with CODE=a checkout of the old main and of this one (docs/outputs.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def main(code: str, top: Path) -> None:
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    env = {
        **os.environ,
        "PYTHONPATH": code,
        "DOTS_PROGRESS": "0",
        "HF_HUB_OFFLINE": "1",
        "DOTS_OUTPUTS": str(top / "outputs"),
        "DOTS_CACHE": str(top / "cache"),
    }
    sys.path.insert(0, code)
    import torch

    from dots.testing import make_finetuned, make_tiny_model

    def family(root: Path) -> Path:
        base = make_tiny_model(root / "base", dtype=torch.bfloat16)
        make_finetuned(base, root / "sft", seed=1, scale=0.02)
        make_finetuned(base, root / "rlvr", seed=2, scale=0.01, density=0.3)
        return root

    def models(fam: Path) -> list[str]:
        return [f"backbone.base={fam / 'base'}", *(f"+backbone.sources.{k}={fam / k}" for k in ("sft", "rlvr"))]

    def run(case: str, args: list[str], cwd: Path, watched: Path) -> None:
        before = files(watched)
        start = time.time()
        proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        lost = len(set(before) - set(files(watched)))
        row = {"case": case, "exit": proc.returncode, "user_files_lost": f"{lost}/{len(before)}"}
        row["stderr_last"] = lines[-1][:400] if lines else ""
        print(json.dumps({**row, "seconds": round(time.time() - start, 1)}))

    fam = family(top / "models1")
    project = top / "project"
    (project / "src").mkdir(parents=True)
    (project / "notes.md").write_text("notes\n")
    (project / "src" / "main.py").write_text("print(1)\n")
    merge = ["dots.merge", "method=task_arithmetic", *models(fam), "overwrite=true"]
    run("merge output=. overwrite=true (project dir)", [*merge, "output=."], project, project)
    fam2 = family(top / "models2")
    merge2 = ["dots.merge", "method=task_arithmetic", *models(fam2), "overwrite=true"]
    run("merge output=<folder holding base/sft/rlvr> overwrite=true", [*merge2, f"output={fam2}"], top, fam2)
    others = top / "my-models"
    for name in ("llama-3-8b", "qwen2.5-7b"):
        (others / name).mkdir(parents=True)
        (others / name / "config.json").write_text("{}\n")
        (others / name / "model.safetensors").write_bytes(b"\0" * 64)
    pool = top / "pool.jsonl"
    pool.write_text("\n".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(6)))
    search = [
        "dots.search", "engine=hf", "backbone=custom", "backbone.name=tiny", *models(fam), "backbone.prompt=plain",
        "backbone.max_tokens=4", "pool=jsonl", f"pool.path={pool}", "selection.n=2", "selection.m=2",
        "selection.threshold=1.0", "search.n_startup_trials=2", "search.n_trials=2", "search.k=2",
        f"run_dir={top / 'run'}", f"export.dir={others}",
    ]  # fmt: skip
    run("search export.dir=<folder of other models>", search, top, others)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    main(sys.argv[1], Path(sys.argv[2]))
