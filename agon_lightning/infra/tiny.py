"""The shipped tiny base model: a near character-level tokenizer and a ~1M-parameter Qwen3.

Agon needs a base that already half-solves its task, so a laptop run shows the pair
improving within minutes, offline. A real Qwen3 architecture (so every code path that
serves a Hub checkpoint serves this one) shrunk to about a million parameters. Digits and
symbols are one token each: arithmetic is digit work, and the model should see every digit.
The fixed words of the prompts are one token each: the prompt preamble would otherwise be
most of every sequence, and training cost grows with sequence length.

The tokenizer keeps ``<think>``, ``</think>``, ``<answer>`` and ``</answer>`` as single
tokens that decode back to their text (they are added tokens, not special ones, so
``skip_special_tokens`` keeps them); the chat markers and the padding token are special.
Characters outside printable ASCII fall back to their UTF-8 bytes, so any text encodes and
decodes exactly. ``agon sft --config configs/sft_tiny.yaml`` trains the weights in
:data:`TINY_MODEL_DIR` from these definitions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerFast, Qwen3Config

TINY_MODEL_DIR = Path(__file__).parents[1] / "assets" / "tiny-qwen3"

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, "<|im_start|>", EOS_TOKEN)
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

# The Qwen chat layout without a default system prompt; extra keyword arguments
# (e.g. ``enable_thinking``) are accepted and ignored.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


# Whole-word tokens (with and without a leading space) for the words of the shipped task
# prompts, the chat roles and the challenge templates; everything else is spelled out.
WORDS = (
    "State the final answer to following arithmetic problem Calculate What is Solve Compute Evaluate "
    "user assistant system Rival Another solver summary of its attempt It may be wrong yourself"
).split()

# A word is a run of letters with at most one leading space; any other character stands alone,
# so numbers are always read digit by digit.
_PIECES = r" ?[A-Za-z]+|[\s\S]"


def build_tokenizer(model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """The tokenizer of the tiny model: single characters, plus whole words from :data:`WORDS`.

    Ids: the three special tokens, the four tag tokens, newline, tab, printable ASCII, the
    256 byte-fallback tokens ``<0x00>`` … ``<0xFF>``, then the merged word pieces. The merges
    come from a BPE trainer run on :data:`WORDS` alone, so they are the same on every build.

    Args:
        model_max_length: Longest sequence the model is meant to see.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    chars = ["\n", "\t"] + [chr(code) for code in range(32, 127)]
    pieces = pre_tokenizers.Split(Regex(_PIECES), behavior="isolated")
    words = Tokenizer(models.BPE())
    words.pre_tokenizer = pieces
    trainer = trainers.BpeTrainer(vocab_size=100_000, initial_alphabet=chars, show_progress=False)
    words.train_from_iterator([*WORDS, *(" " + w for w in WORDS)], trainer)
    merges = [tuple(pair) for pair in json.loads(words.to_str())["model"]["merges"]]

    byte_tokens = [f"<0x{value:02X}>" for value in range(256)]
    ordered = [*SPECIAL_TOKENS, *TAG_TOKENS, *chars, *byte_tokens, *("".join(pair) for pair in merges)]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(ordered))}
    # byte_fallback spells characters outside the vocabulary as their UTF-8 bytes.
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True))
    tokenizer.pre_tokenizer = pieces
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
    )


@dataclass
class TinyArchitecture:
    """Shape of a freshly initialised tiny Qwen3 (the defaults give ~1.0M parameters).

    Attributes:
        hidden_size: Width of the residual stream.
        num_layers: Transformer blocks.
        num_heads: Query heads; ``hidden_size / num_heads`` is the head dimension.
        num_kv_heads: Key/value heads (grouped-query attention); must divide ``num_heads``.
        intermediate_size: Width of the SwiGLU MLP.
        max_position_embeddings: Longest sequence (prompt + completion).
    """

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 512

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyArchitecture.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})")

    def config(self, tokenizer: PreTrainedTokenizerFast) -> Qwen3Config:
        """The ``Qwen3Config`` for this shape and ``tokenizer``'s vocabulary and special ids."""
        return Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.hidden_size // self.num_heads,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=True,
            max_window_layers=self.num_layers,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
        )
