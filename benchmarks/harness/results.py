"""Where results go: Markdown sections printed and appended to the results of their question
(benchmarks/results/<question>.md, indexed by benchmarks/RESULTS.md), JSON files, and the one-line
description of the machine a table was measured on."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


def results_file(question: str) -> Path:
    """The dated log of one question's results (`swap`, `merge`, ...): benchmarks/results/<question>.md."""
    return RESULTS / f"{question}.md"


def append(text: str, question: str) -> None:
    """Append `text` as it is to the results of `question`, the newest section last."""
    with open(results_file(question), "a") as fh:
        fh.write(text)


def report(lines: list[str], record: bool, question: str) -> None:
    """Print a Markdown section and, with `record`, append it to the results of `question`."""
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        append(text, question)


def write_json(path: Path, obj: Any) -> None:
    """Write `obj` as indented JSON, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)


def cpu_machine() -> str:
    """'N CPU cores (arch), OS': the default machine line of a RESULTS.md section."""
    return f"{os.cpu_count()} CPU cores ({platform.machine()}), {platform.system()}"


def section(title: str, date: str | None, body: list[str]) -> list[str]:
    """A dated RESULTS.md section: a blank line, `## title — date` (today by default), the body."""
    when = date or datetime.date.today().isoformat()
    return ["", f"## {title} — {when}", "", *body, ""]


def size_table(args: Any, lines: list[str], peaks: list[float], title: str, notes: list[str], question: str) -> None:
    """Print a table over trio sizes and the peak RSS ratio at the largest size over the smallest (NaN
    with one size) against the streaming target of ≤ 1.3; with `--record`, append them to the results
    of `question` under `title`, the command line and `notes` (what each run is, the machine)."""
    sizes = args.sizes
    ratio = peaks[-1] / peaks[0] if len(peaks) > 1 else float("nan")
    print("\n".join(lines))
    print(f"peak RSS ratio {sizes[-1]:g} GB / {sizes[0]:g} GB: {ratio:.3f} (target <= 1.3)")
    if args.record:
        verdict = f"Peak RSS ratio {sizes[-1]:g} GB / {sizes[0]:g} GB: **{ratio:.3f}** (target ≤ 1.3)."
        body = [f"Command: `{command_line()}`.", *notes, "", *lines, "", verdict]
        append("\n".join(section(title, args.date, body)), question)


def command_line() -> str:
    """The command line that ran this benchmark, as one types it (`python -m benchmarks.<question> VARIANT …`
    through the door, `python -m benchmarks.<question>.<module> …` or a script otherwise)."""
    head = sys.argv[0] if sys.argv[0].startswith("python ") else f"python {sys.argv[0]}"
    return " ".join([head, *map(shlex.quote, sys.argv[1:])])
