"""Upload an exported model to the Hugging Face Hub; a failed push keeps the export and
prints the command that retries it."""

from __future__ import annotations

import sys
from pathlib import Path


def push_to_hub(folder: Path, repo_id: str, private: bool = True) -> str:
    """Create the repo (if needed) and upload the folder; returns the repo URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="Upload model synthesized with dots"
    )
    return str(url)


def try_push(folder: Path, repo_id: str, private: bool) -> bool:
    try:
        url = push_to_hub(folder, repo_id, private)
    except Exception as exc:  # offline, auth, name taken: keep the export, say how to retry
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(
            f"push to {repo_id} failed: {first}\n  the model is kept at {folder}\n"
            f"  retry with: python -m dots.export push {folder} {repo_id}" + (" --private" if private else ""),
            file=sys.stderr,
        )
        return False
    print(f"pushed to {url}")
    return True
