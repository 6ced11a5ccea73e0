"""A scripted rollout for tests: deterministic completions, without sampling from the model.

The text of each completion is a function of the prompt and the sample index, so a run with
any number of processes, options or restarts sees the same games. Lengths vary, and one
completion in four is cut off at ``max_new_tokens`` without an EOS, so options that depend on
lengths and truncation (``mask_truncated``, ``dr_grpo``) have something to act on.
"""

from __future__ import annotations

import zlib

import torch

from agon_lightning.rollout.hf import Rollout, RolloutBatch, completion_mask


def scripted_text(prompt: str, sample: int) -> tuple[str, bool]:
    """``(completion, truncated)`` for ``prompt``'s ``sample``-th completion."""
    h = zlib.crc32(f"{prompt}|{sample}".encode())
    answer = h % 3
    note = "abcdefg"[h % 7]  # a post-reasoning note, so summaries (and challenger prompts) differ
    return f"<think>{'1+' * (h % 5)}{answer}</think>{note}<answer>{answer}</answer>", h % 4 == 0


class ScriptedRollout(Rollout):
    """Deterministic completions ``<think>…</think><answer>k</answer>``, k from a hash of prompt and sample."""

    def __init__(self, max_new_tokens: int = 24, temperature: float = 1.0) -> None:
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        device = next(model.parameters()).device
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        ids = enc["input_ids"].repeat_interleave(num_samples, 0).to(device)
        attn = enc["attention_mask"].repeat_interleave(num_samples, 0).to(device)
        rows = []
        for p in prompts:
            for j in range(num_samples):
                text, cut = scripted_text(p, j)
                row = tokenizer(text, add_special_tokens=False)["input_ids"][: self.max_new_tokens]
                if cut:  # no EOS: the completion ran out of budget
                    row = (row * self.max_new_tokens)[: self.max_new_tokens]
                else:
                    row = row[: self.max_new_tokens - 1] + [tokenizer.eos_token_id]
                rows.append(row)
        width = max(map(len, rows))
        comp = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
        for i, r in enumerate(rows):
            comp[i, : len(r)] = torch.tensor(r)
        mask, truncated = completion_mask(comp, [tokenizer.eos_token_id])
        texts = tokenizer.batch_decode(
            comp.masked_fill(mask == 0, tokenizer.pad_token_id), skip_special_tokens=True
        )
        return RolloutBatch(ids, attn, comp.to(device), mask.to(device), texts, mask.sum(1), truncated)
