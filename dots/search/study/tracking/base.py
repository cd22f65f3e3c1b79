"""What the tracking backends share (dots.search.study.tracking): the `Tracker` protocol, the names of
the records, and the config and trial rows as a backend logs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from dots.errors import DotsError

MARKER = "pruned"  # logged for every trial (0 or 1): the trials a tracker holds are its steps
# logged when present
FILES = ("config.yaml", "result.yaml", "trials.csv", "pareto.png", "landscape.png", "confirm.json", "fixed.csv")
RECORDS = "tracking"  # <run_dir>/tracking/: the backends' run ids and what they logged


class Tracker(Protocol):
    """One tracking backend: opened once per process, then trials, the pick, and its end."""

    def check(self) -> None:
        """The package imports and the service answers, else a one-line DotsError; writes nothing."""

    def start(self, run_dir: Path, config: dict, worker: int, workers: int) -> set[int]:
        """Open (or reopen, by the id kept in `run_dir/tracking`) the run and log the config;
        the numbers of the trials it holds already."""

    def log_trial(self, number: int, metrics: dict[str, float]) -> None:
        """One trial's values at step `number`."""

    def log_pick(self, step: int, pick: dict[str, float], files: list[Path]) -> None:
        """The pick after `step` scored trials, and the run's files."""

    def close(self, status: str) -> None:
        """End this process's run: FINISHED, FAILED or KILLED."""


def missing_package(exc: ImportError, choice: str, package: str) -> DotsError:
    """The one line for a backend whose package is not installed."""
    return DotsError(
        f"tracking={choice} needs the {package} package, which cannot be imported ({exc}): "
        f"pip install 'dots-synth[tracking]' (or pip install {package}), or run with tracking=none"
    )


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys (lists kept as values): MLflow's params."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def trial_metrics(row: dict) -> dict[str, float]:
    """A trials.csv row as numbers: every value but number and state, and MARKER (1: pruned)."""
    metrics = {k: float(v) for k, v in row.items() if k not in ("number", "state") and v is not None}
    metrics[MARKER] = float(row["state"] == "PRUNED")
    return metrics
