"""A character-level tokenizer padded to a generated model's vocabulary (what `dots.search`,
SAR's Fisher pass and vLLM need of a model directory)."""

from __future__ import annotations

from pathlib import Path


def write_tokenizer(out: Path, vocab: int) -> None:
    """A character-level fast tokenizer (printable ASCII and newline, <pad> <s> </s> <unk> =
    ids 0-3) padded with filler tokens to `vocab` entries, so that every id a model with
    random weights may sample decodes (vLLM's detokenizer needs that)."""
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    chars = sorted(set(string.printable[:95] + "\n"))
    table = {tok: i for i, tok in enumerate(specials + chars)}
    for i in range(len(table), vocab):
        table[f"<x{i}>"] = i
    tok = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out)
