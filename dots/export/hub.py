"""Upload an exported model to the Hugging Face Hub; a failed push keeps the export and
prints the command that retries it.

A 7B export is ~15 GB and a 70B one ~140 GB, so an upload must survive an interruption:
with `huggingface_hub` < 2 a folder above `LARGE_FOLDER_BYTES` goes through
`upload_large_folder` (resumable, many commits); from 2.0 on `upload_folder` itself
uploads through hf_xet in batched commits and a rerun resumes it, and
`upload_large_folder` is gone.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dots.io.destination import RECORD

__all__ = ["HUB_IGNORE", "try_push"]

LARGE_FOLDER_BYTES = 5 * 2**30
HUB_IGNORE = [RECORD]  # the record of a dots output (`dots.io.destination`) stays local


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and p.name != RECORD)


def push_to_hub(folder: Path, repo_id: str, private: bool = True) -> str:
    """Create the repo (if needed) and upload the folder; returns the repo URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    upload_large = getattr(api, "upload_large_folder", None)
    if upload_large is not None and folder_bytes(folder) > LARGE_FOLDER_BYTES:
        upload_large(
            repo_id=repo_id, folder_path=str(folder), repo_type="model", private=private, ignore_patterns=HUB_IGNORE
        )
    else:
        api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="model",
            commit_message="Upload model synthesized with dots",
            ignore_patterns=HUB_IGNORE,  # the record of a dots output stays local
        )
    return str(url)


def try_push(folder: Path, repo_id: str, private: bool) -> bool:
    """Push, or keep the export and print the retry command (offline, auth, name taken)."""
    try:
        url = push_to_hub(folder, repo_id, private)
    except Exception as exc:  # whatever the Hub or the network raised: the export stays
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(
            f"push to {repo_id} failed: {first}\n  the model is kept at {folder}\n"
            f"  retry with: python -m dots.export push {folder} {repo_id}" + (" --private" if private else ""),
            file=sys.stderr,
        )
        return False
    print(f"pushed to {url}")
    return True
