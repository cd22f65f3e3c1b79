"""The lab's Qwen2 model: creation, atomic saving as an ordinary HF model directory, loading."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

from dots.io.commit import claim_temp, install_dir, release, sweep
from dots.io.destination import seal
from dots.io.modes import apply_umask
from dots.lab.tokenizer import build_char_tokenizer

__all__ = ["new_model", "save_model"]


@contextmanager
def _quiet() -> Iterator[None]:
    """No transformers progress bars for these tiny files (the stage has its own bar)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def new_model(model_cfg: Mapping, tok: PreTrainedTokenizerFast, seed: int) -> torch.nn.Module:
    """A freshly initialised float32 Qwen2ForCausalLM (seeded)."""
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=int(model_cfg["hidden_size"]),
        intermediate_size=int(model_cfg["intermediate_size"]),
        num_hidden_layers=int(model_cfg["num_hidden_layers"]),
        num_attention_heads=int(model_cfg["num_attention_heads"]),
        num_key_value_heads=int(model_cfg["num_key_value_heads"]),
        max_position_embeddings=int(model_cfg["max_position_embeddings"]),
        rope_theta=float(model_cfg["rope_theta"]),  # type: ignore[call-arg]  # Qwen2Config takes it via **kwargs
        tie_word_embeddings=bool(model_cfg["tie_word_embeddings"]),
        initializer_range=float(model_cfg["initializer_range"]),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        use_sliding_window=False,
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def load_model(path: str | Path) -> torch.nn.Module:
    """A saved lab model as float32 (the master copy for further training), eval mode."""
    with _quiet():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


def save_model(model: torch.nn.Module, out: Path, dtype: str, info: Mapping) -> Path:
    """Write `out` through the commit protocol (`dots.io.commit`: a locked temporary beside it, synced,
    then renamed): weights in `dtype`, tokenizer, lab.json and the record of a dots "lab" output."""
    out = Path(out)
    sweep(out)  # what a killed build left beside it
    tmp = claim_temp(out)
    try:
        state = {k: v.detach().to(DTYPES[dtype]).contiguous() for k, v in model.state_dict().items()}
        model.config.dtype = DTYPES[dtype]
        with _quiet():
            model.save_pretrained(tmp, state_dict=state, safe_serialization=True)  # type: ignore[operator]  # nn.Module stub: a PreTrainedModel
        tok = build_char_tokenizer()
        tok.save_pretrained(tmp)
        GenerationConfig(
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            do_sample=False,
        ).save_pretrained(tmp)
        (tmp / "lab.json").write_text(json.dumps(info, indent=2, sort_keys=True))
        apply_umask(tmp)  # save_pretrained's safetensors file is 0600
        seal(tmp, "lab")
        if out.exists():  # a concurrent builder finished first: keep theirs
            shutil.rmtree(tmp)
        else:
            install_dir(tmp, out, lambda old: None)  # (`out` is new: one rename)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        release(tmp)
    return out
