"""Streaming the final stage of ``agon serve``: tokens as ``generate`` produces them, as text deltas.

:class:`StreamingHFRollout` is :class:`~agon_lightning.rollout.hf.HFRollout` sampling through
``generate`` with a :class:`RowStreamer`, which hands every row's new token to a callback at each
step; :class:`TextDeltas` turns one row's tokens into the text a client receives, holding back
what could still become a stop string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from agon_lightning.rollout.hf import HFRollout


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string (excluded), and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


class RowStreamer(BaseStreamer):
    """``generate``'s streamer for a batch: each step's token of every row goes to ``on_token(row, id)``.

    ``generate`` first puts the prompt ids ``[B, P]`` (one call per chunk of ``max_batch_size``
    rows), then the new token of each row ``[B]`` at every step.
    """

    def __init__(self, on_token: Callable[[int, int], None]) -> None:
        self.on_token = on_token
        self.offset = 0
        self.width = 0

    def put(self, value: torch.Tensor) -> None:
        if value.dim() == 2:  # a new generate call: its rows follow the previous call's
            self.offset += self.width
            self.width = value.shape[0]
            return
        for i, token in enumerate(value.tolist()):
            self.on_token(self.offset + i, token)

    def end(self) -> None:
        return None


class StreamingHFRollout(HFRollout):
    """:class:`HFRollout` sampling through ``generate`` with a :class:`RowStreamer` (not the decode loop)."""

    def __init__(self, rollout: HFRollout, on_token: Callable[[int, int], None]) -> None:
        super().__init__(
            rollout.max_new_tokens, rollout.temperature, rollout.top_p, rollout.top_k,
            rollout.max_batch_size, rollout.merge_adapter, fused_decode=False,
        )  # fmt: skip
        self.streamer = RowStreamer(on_token)

    def _generate(self, model, ids, attn, rows, pad_id, kwargs):
        return super()._generate(model, ids, attn, rows, pad_id, {**kwargs, "streamer": self.streamer})


class TextDeltas:
    """Turns a row's tokens into text deltas: decoded so far, held back while a stop string may be forming."""

    def __init__(
        self, tokenizer: Any, eos_ids: list[int], stops: list[str], emit: Callable[[str], None]
    ) -> None:
        self.tokenizer, self.eos_ids, self.stops, self.emit = tokenizer, eos_ids, stops, emit
        self.ids: list[int] = []
        self.sent = 0
        self.done = False

    def add(self, token: int) -> None:
        if self.done:
            return
        if token in self.eos_ids:
            self.finish()
            return
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # half of a multi-byte character: wait for the rest
            return
        cut, stopped = cut_at_stop(text, self.stops)
        hold = 0 if stopped else max((len(s) - 1 for s in self.stops), default=0)
        self._send(cut[: max(len(cut) - hold, self.sent)])
        self.done = stopped

    def finish(self) -> None:
        """Send what was held back (the end of a row that met no stop string)."""
        if not self.done:
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            self._send(cut_at_stop(text, self.stops)[0])
        self.done = True

    def _send(self, text: str) -> None:
        if len(text) > self.sent:
            self.emit(text[self.sent :])
            self.sent = len(text)
