"""The run's study as optuna-dashboard shows it: the objectives by name (set when the study
is created), each trial's λ and phase times (its params and user attributes), and the
run's Pareto plot, pick and trial table as study artifacts kept in `<run_dir>/artifacts`.

    optuna-dashboard sqlite:///RUN_DIR/study.db --artifact-dir RUN_DIR/artifacts
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

ARTIFACT_DIR = "artifacts"


def attach_artifacts(study: Any, run_dir: Path, files: Iterable[Path]) -> list[str]:
    """Upload `files` to the study's artifacts under `run_dir/artifacts`; their ids."""
    from optuna.artifacts import FileSystemArtifactStore, upload_artifact

    store_dir = run_dir / ARTIFACT_DIR
    store_dir.mkdir(exist_ok=True)
    store = FileSystemArtifactStore(str(store_dir))
    return [upload_artifact(artifact_store=store, file_path=str(f), study_or_trial=study) for f in files]


def dashboard_command(storage: str | None, run_dir: Path) -> str:
    """The command that opens this run's study in optuna-dashboard (`pip install optuna-dashboard`);
    `storage` as `search.storage` gives it (None: the run's sqlite file)."""
    url = storage or f"sqlite:///{(run_dir / 'study.db').resolve()}"
    journal = " --storage-class JournalFileStorage" if url.endswith((".journal", ".log")) and "://" not in url else ""
    return f"optuna-dashboard {url}{journal} --artifact-dir {run_dir.resolve() / ARTIFACT_DIR}"
