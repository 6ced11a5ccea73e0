"""The tiny model's tokenizer and config, and the shipped assets (loaded offline)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM

from agon_lightning.game.prompts import Prompts
from agon_lightning.game.types import Problem
from agon_lightning.infra.tiny import TAG_TOKENS, TINY_MODEL_DIR, TinyArchitecture, build_tokenizer

COMPLETION = "<think>42-25=17 17-73=-56</think>17,-56<answer>-56</answer>"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize(
    "text",
    [
        COMPLETION,
        "State the final answer to the following arithmetic problem: 42 - 25 - 73 =",
        "theory of everything\n\tsays: ( -3 * 4 ) / 2 ≠ 7 — café",
    ],
)
def test_round_trip(tokenizer, text: str) -> None:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_digits_are_single_tokens_and_prompt_words_are_whole(tokenizer) -> None:
    tokens = tokenizer.tokenize("State the final answer: 1234 -56")
    assert tokens == ["State", " the", " final", " answer", ":", " ", "1", "2", "3", "4", " ", "-", "5", "6"]


def test_tags_are_single_tokens_kept_when_special_tokens_are_skipped(tokenizer) -> None:
    for tag in TAG_TOKENS:
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1
    ids = tokenizer(COMPLETION, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == COMPLETION
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id


def test_chat_template_through_prompts(tokenizer) -> None:
    problem = Problem("1 + 2 =", "3")
    prompts = Prompts(
        challenge="{question}\nRival: {summary}", chat_template_kwargs={"enable_thinking": True}
    )
    assert (
        prompts.draft_prompt(tokenizer, problem)
        == "<|im_start|>user\n1 + 2 =<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompts.challenge_prompt(tokenizer, problem, "3") == (
        "<|im_start|>user\n1 + 2 =\nRival: 3<|im_end|>\n<|im_start|>assistant\n"
    )


def test_save_and_reload(tokenizer, tmp_path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.decode(loaded(COMPLETION)["input_ids"]) == COMPLETION
    chat = [{"role": "user", "content": "hi"}]
    assert loaded.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    )


def test_tokenizer_build_is_deterministic(tokenizer) -> None:
    assert build_tokenizer().get_vocab() == tokenizer.get_vocab()


def test_default_architecture_has_about_a_million_parameters(tokenizer) -> None:
    model = Qwen3ForCausalLM(TinyArchitecture().config(tokenizer))
    assert 1_000_000 <= model.num_parameters() <= 1_100_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_heads": 3}, "divisible by num_heads"),
        ({"num_kv_heads": 3}, "must divide"),
        ({"num_layers": 0}, ">= 1"),
    ],
)
def test_architecture_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TinyArchitecture(**kwargs)


def test_shipped_model_loads_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(TINY_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(TINY_MODEL_DIR)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert 1_000_000 <= model.num_parameters() <= 5_000_000
    # The shipped tokenizer is the one tiny.py builds, so a fresh SFT run reproduces it.
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab()
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.vocab_size == len(tokenizer)


def test_shipped_model_answers_in_the_game_format() -> None:
    """The shipped model drafts ``<think>…</think>summary<answer>…</answer>`` on a held-out problem."""
    tokenizer = AutoTokenizer.from_pretrained(TINY_MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(TINY_MODEL_DIR)
    prompt = Prompts().draft_prompt(
        tokenizer, Problem("State the final answer to the following arithmetic problem: 31 + 45 - 12 =")
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=80, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert text.startswith("<think>") and "</think>" in text and text.endswith("</answer>"), text


def test_shipped_evaluation_record_shows_partial_competence() -> None:
    """``sft_eval.json`` records the held-out accuracy the SFT run stopped at."""
    report = json.loads((TINY_MODEL_DIR / "sft_eval.json").read_text())
    last = report["evaluations"][-1]
    assert last["step"] == report["global_step"]
    assert 0.2 <= last["val/draft_acc"] <= 0.5
