"""tracking=wandb: a W&B run per search run directory (per worker when several share it).

The run's id and the trials it was given are kept in `<run_dir>/tracking/wandb-<worker>.json`,
so a resumed search reopens the same W&B run (`resume="allow"`) and never logs a trial twice —
offline too, where nothing can be asked of a server. Each trial is one history row with its
number as the `trial` key, the x axis of every chart (W&B's own `_step` must increase, and
workers tell trials out of order). Files: W&B's `dir` (default: the run directory).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, cast

from dots.errors import DotsError, first_line
from dots.search.study.tracking.base import RECORDS, missing_package

LOGIN_TIMEOUT_S = 15


class WandbTracker:
    """The `Tracker` of tracking=wandb (options: project, entity, mode, dir, run_name, group, tags)."""

    def __init__(self, options: dict):
        self.options = options
        self.run: Any = None
        self.record = Path()
        self.held: dict[str, Any] = {}

    def mode(self) -> str:
        """tracking.mode, else $WANDB_MODE, else online."""
        return str(self.options.get("mode") or os.environ.get("WANDB_MODE") or "online")

    def check(self) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing_package(exc, "wandb", "wandb") from None
        if self.mode() != "online":
            return
        options: dict[str, Any] = {"verify": True, "timeout": LOGIN_TIMEOUT_S}
        if "prompt" in inspect.signature(wandb.login).parameters:  # (newer wandb: never ask on a terminal)
            options["prompt"] = False
        try:
            ok = wandb.login(**options)
        except Exception as exc:
            raise DotsError(
                f"tracking=wandb cannot log in to W&B: {first_line(exc)} (or log offline: tracking.mode=offline)"
            ) from None
        if not ok:
            raise DotsError(
                "tracking=wandb is online but W&B has no API key: run `wandb login` or set WANDB_API_KEY, "
                "or log offline with tracking.mode=offline (then `wandb sync`)"
            )

    def start(self, run_dir: Path, config: dict, worker: int, workers: int) -> set[int]:
        import wandb

        self.record = run_dir / RECORDS / f"wandb-{worker}.json"
        self.held = json.loads(self.record.read_text()) if self.record.exists() else {}
        run_id = self.held.get("run_id") or secrets.token_hex(4)
        opts = self.options
        name = opts.get("run_name") or run_dir.name
        directory = opts.get("dir") or (None if os.environ.get("WANDB_DIR") else str(run_dir))
        self.run = wandb.init(
            project=opts.get("project"),
            entity=opts.get("entity"),
            dir=directory,
            mode=cast(Any, self.mode()),  # (checked: online, offline or disabled)
            id=run_id,
            resume="allow",
            name=name if workers == 1 else f"{name}-worker{worker}",
            group=opts.get("group") or (run_dir.name if workers > 1 else None),
            tags=list(opts.get("tags") or []),
            job_type="search",
        )
        self.run.config.update(config, allow_val_change=True)  # (a resumed run: the config it runs now)
        self.run.define_metric("trial")
        self.run.define_metric("*", step_metric="trial")
        self.held = {"run_id": run_id, "logged": sorted(set(self.held.get("logged", [])))}
        self._save()
        return set(self.held["logged"])

    def _save(self) -> None:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.held) + "\n")
        tmp.replace(self.record)

    def log_trial(self, number: int, metrics: dict[str, float]) -> None:
        self.run.log({"trial": number, **metrics})
        self.held["logged"].append(number)
        self._save()

    def log_pick(self, step: int, pick: dict[str, float], files: list[Path]) -> None:
        """The pick in the run's summary with the Pareto plot, and the files as one artifact
        (a new version only when they changed)."""
        import wandb

        summary: dict[str, Any] = {**pick, "scored_trials": step}
        for name in ("pareto", "landscape"):
            plot = next((f for f in files if f.name == f"{name}.png" and f.exists()), None)
            if plot is not None:
                summary[name] = wandb.Image(str(plot))
        self.run.summary.update(summary)
        artifact = wandb.Artifact(re.sub(r"[^\w.-]", "_", f"dots-{self.run.name}"), type="dots-search")
        for path in files:
            if path.exists():
                artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def close(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)
            self.run = None
