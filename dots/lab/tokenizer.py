"""A character-level tokenizer saved as a transformers fast tokenizer (tokenizer.json)."""

from __future__ import annotations

import string

from transformers import PreTrainedTokenizerFast

__all__ = ["build_char_tokenizer"]

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]
CHARS = string.printable[:95] + "\n"  # printable ASCII (space included) and newline


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character, plus pad/bos/eos/unk."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(CHARS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )
    fast.model_max_length = 4096
    return fast
