"""Lazy checkpoint reader: a local model directory or a Hub repo id, one tensor at a time.

`Checkpoint` parses the safetensors headers of a model directory (sharded or not) and
reads each tensor, or a range of its rows, with plain file reads into private memory:
nothing is mapped, so resident memory is bounded by the tensors alive, whatever the
checkpoint's size. A Hub id is resolved through huggingface_hub's cache (offline mode
honoured).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Iterable, Iterator

import torch

from dots.errors import DotsError
from dots.io.metadata import check_config, check_weight_map, read_json
from dots.io.safetensors import TensorInfo, read_safetensors_header

__all__ = ["Checkpoint", "offline"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".msgpack", ".h5", ".gguf")
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# Files written by dots itself; never copied from a source into an output.
OWN_FILES = ("README.md",)


def resolve_model_dir(path_or_id: str | os.PathLike, revision: str | None = None) -> Path:
    """Return a local directory for a model path or a Hub repo id.

    A Hub id is fetched with `huggingface_hub.snapshot_download` (weights, configs,
    tokenizer files and the model card, whose licence a merged card repeats), which
    honours HF_HUB_OFFLINE and the local cache.
    """
    text = str(path_or_id)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise DotsError(f"not a model directory (a file): {text}")
    looks_like_path = text.startswith((".", "/", "~")) or text.count("/") != 1 or os.sep in text.replace("/", "")
    if looks_like_path:
        raise DotsError(f"model path does not exist: {text}")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        local = snapshot_download(
            repo_id=text,
            revision=revision,
            allow_patterns=["*.safetensors", "*.json", "*.txt", "*.model", "*.jinja", "*.tiktoken", "*.py", "*.md"],
        )
    except LocalEntryNotFoundError:
        raise DotsError(
            f"model {text!r} is neither a local directory nor in the Hub cache"
            + (" (HF_HUB_OFFLINE is on)" if offline() else " and could not be downloaded")
        ) from None
    except (HfHubHTTPError, ValueError, OSError) as exc:
        raise DotsError(f"cannot fetch {text!r} from the Hub: {str(exc).splitlines()[0]}") from None
    return Path(local)


def offline() -> bool:
    """Whether HF_HUB_OFFLINE turns the Hub off (huggingface_hub's reading: 1, ON, YES or TRUE)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def snapshot_revision(path: Path) -> str | None:
    """The commit of a Hugging Face cache snapshot (`models--org--name/snapshots/<commit>`),
    or None for any other directory."""
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.name
    return None


def read_config(model_dir: Path) -> dict:
    """`model_dir`/config.json as a dict; a one-line DotsError when missing, malformed or a
    known field has the wrong type (`dots.io.metadata.check_config`)."""
    cfg = model_dir / "config.json"
    if not cfg.exists():
        raise DotsError(f"{model_dir} has no config.json")
    return check_config(read_json(cfg, "config"), cfg)


class Checkpoint:
    """A model directory read lazily: names, shapes, dtypes, one tensor at a time, config."""

    def __init__(self, path_or_id: str | os.PathLike, revision: str | None = None):
        self.source = str(path_or_id)
        self.path = resolve_model_dir(path_or_id, revision)
        self.revision = snapshot_revision(self.path)  # the commit read, for a Hub id
        self._files = self._weight_files()
        self._where: dict[str, tuple[Path, int, int]] = {}  # name -> (file, byte offset, nbytes)
        self._info: dict[str, TensorInfo] = {}
        self._config: dict | None = None
        if (self.path / "config.json").exists():
            self._config = read_config(self.path)  # a malformed config.json fails here, before any work
        for file in self._files:
            for name, (info, offset, nbytes) in read_safetensors_header(file).items():
                if name in self._where:
                    raise self._defined_twice(name, self._where[name][0], file)
                self._where[name] = (file, offset, nbytes)
                self._info[name] = info
        for name, shard in self._weight_map.items():
            if self._where.get(name, (None,))[0] != self.path / shard:
                raise DotsError(f"{self.path / INDEX_NAMES[0]}: tensor {name!r} is not in its shard {shard}")

    def _weight_files(self) -> list[Path]:
        index = self.path / INDEX_NAMES[0]
        self._weight_map: dict[str, str] = {}
        if index.exists():
            self._weight_map = weight_map = check_weight_map(read_json(index, "index"), index)
            files = sorted({self.path / f for f in weight_map.values()})
            missing = [f.name for f in files if not f.exists()]
            if missing:
                raise DotsError(f"{self.path}: index names missing shard(s) {', '.join(missing[:3])}")
            return files
        # hidden files are no weights (macOS's `._model.safetensors`, an editor's or a writer's temporaries)
        files = sorted(f for f in self.path.glob("*.safetensors") if not f.name.startswith("."))
        if files:
            return files
        if list(self.path.glob("*.bin")) or list(self.path.glob("*.pt")):
            raise DotsError(
                f"{self.path} holds only PyTorch .bin weights; convert it first: "
                f"python -m dots.io convert {self.path} OUTPUT_DIR"
            )
        raise DotsError(f"not a model directory (no *.safetensors weights): {self.path}")

    def _defined_twice(self, name: str, first: Path, second: Path) -> DotsError:
        """Two weight files of this checkpoint both hold tensor `name`: which one a loader reads
        depends on its order, so neither is taken (one line naming both)."""
        if self._weight_map:
            listed = self._weight_map.get(name)
            where = f"is listed in {listed}" if listed else "is not listed"
            return DotsError(
                f"{self.path / INDEX_NAMES[0]}: tensor {name!r} {where}, but both {first.name} and {second.name} "
                "hold it: remove it from the shard the index does not name"
            )
        return DotsError(
            f"{self.path}: tensor {name!r} is defined in two weight files, {first.name} and {second.name}, and "
            "no model.safetensors.index.json says which to read: remove the file that does not belong"
        )

    # --- metadata -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._info)

    def __contains__(self, name: str) -> bool:
        return name in self._info

    def info(self, name: str) -> TensorInfo:
        return self._info[name]

    @property
    def config(self) -> dict:
        """config.json as a dict (read once); a DotsError when it is missing or not a JSON object."""
        if self._config is None:
            self._config = read_config(self.path)
        return copy.deepcopy(self._config)  # callers may edit theirs

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or [self.config.get("model_type", "?")]
        return str(archs[0])

    @property
    def tie_word_embeddings(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False))

    def aux_files(self) -> list[Path]:
        """Config, tokenizer and generation files: everything but weights and indexes."""
        return sorted(
            p
            for p in self.path.iterdir()
            if p.is_file()
            and not p.name.endswith(WEIGHT_SUFFIXES)
            and p.name not in INDEX_NAMES
            and p.name not in OWN_FILES
            and not p.name.startswith(".")
        )

    @property
    def total_bytes(self) -> int:
        return sum(i.nbytes for i in self._info.values())

    # --- data -----------------------------------------------------------------------------
    def get(self, name: str) -> torch.Tensor:
        """One tensor read into private memory (plain file read, no mmap).

        Reading instead of mapping keeps the process's RSS bounded by the tensors alive,
        whatever the file size, and the result may be modified in place freely.
        """
        info = self.info(name) if name in self._info else None
        if info is None:
            raise KeyError(name)
        return self._read(name, 0, info.shape[0] if info.shape else 1)

    def get_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of a tensor along dim 0, read alone (for streaming in chunks)."""
        info = self._info.get(name)
        if info is None:
            raise KeyError(name)
        if not info.shape:
            return self.get(name)
        start, stop = max(0, start), min(stop, info.shape[0])
        return self._read(name, start, max(start, stop))

    def _read(self, name: str, start: int, stop: int) -> torch.Tensor:
        file, offset, nbytes = self._where[name]
        info = self._info[name]
        rows = info.shape[0] if info.shape else 1
        row_bytes = nbytes // rows if rows else 0
        shape = (stop - start, *info.shape[1:]) if info.shape else ()
        count = (stop - start) * row_bytes
        if count == 0:
            return torch.empty(shape, dtype=info.dtype)
        buf = torch.empty(count, dtype=torch.uint8)  # not zero-filled, unlike a bytearray
        with open(file, "rb", buffering=0) as fh:
            fh.seek(offset + start * row_bytes)
            view = memoryview(buf.numpy())  # type: ignore[arg-type]  # numpy stubs: ndarray is a Buffer only for Python >= 3.12
            got = 0
            while got < count:
                n = fh.readinto(view[got:])
                if not n:
                    raise DotsError(f"{file} is truncated (reading {name})")
                got += n
        return buf.view(info.dtype).reshape(shape)

    def tensors(self, names: Iterable[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for name in names if names is not None else self.names:
            yield name, self.get(name)

    def fingerprint(self) -> dict:
        """Identity of the weights without hashing their bytes: path, file sizes and mtimes."""
        files = sorted({p for p in self.path.glob("*.safetensors")})
        return {
            "path": str(self.path.resolve()),
            "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files],
        }

    def __repr__(self) -> str:
        return f"Checkpoint({self.source!r}, {len(self._info)} tensors)"
