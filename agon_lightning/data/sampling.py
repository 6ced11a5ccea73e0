"""Reproducible train / held-out samples, independent of the order of the source's rows.

Shuffling row indices with a seed gives a split that changes whenever the rows come in
another order (another shard layout, another Parquet writer, a filter applied upstream). Here
each problem is ranked by a hash of its identity (a DeepMath question's text, a CodeContests
problem's name) and the seed: the held-out set is the ``val_size`` lowest-ranked problems and
the training set the next ``train_size``, so the same source, filters and seed give the same
split from any row order, on every rank. Problems with the same identity are one problem: all
but one are dropped first, so none is on both sides of the split.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from agon_lightning.game.types import Problem
from agon_lightning.infra.errors import UsageError

log = logging.getLogger(__name__)


def rank(identity: str, seed: int) -> bytes:
    """The position of a problem in the seed's order: SHA-256 of the seed and its identity."""
    return hashlib.sha256(f"{seed}\0{identity}".encode()).digest()


def seeded_split(
    problems: list[Problem],
    identity: Callable[[Problem], str],
    val_size: int,
    train_size: int | None,
    seed: int,
    name: str,
    option: str | None = None,
) -> tuple[list[Problem], list[Problem]]:
    """``(train, val)``: ``val_size`` held-out problems and up to ``train_size`` training ones.

    Both lists come in the seed's hash order. A shortfall of training problems is logged, not
    hidden; too few problems for the held-out set is an error.

    Args:
        problems: The filtered problems, in any order.
        identity: What makes two problems the same (the question, a name).
        val_size: Held-out problems.
        train_size: Training problems (``None``: all the rest).
        seed: Seed of the order.
        name: The source, for messages.
        option: How messages name ``val_size`` (default ``val_size=VALUE``): the option and where
            its value came from.

    Raises:
        UsageError: no more distinct problems than ``val_size``, so none would be left to train on.
    """
    ranked = sorted(problems, key=lambda p: (rank(identity(p), seed), identity(p), p.answer or ""))
    unique = [p for i, p in enumerate(ranked) if i == 0 or identity(p) != identity(ranked[i - 1])]
    if len(unique) < len(ranked):
        log.info("%s: dropped %d repeated problems", name, len(ranked) - len(unique))
    if len(unique) <= val_size:
        if not unique:
            raise UsageError(f"{name}: no problem passes the filters; widen them, or check the source")
        raise UsageError(
            f"{name}: {len(unique)} distinct problems pass the filters, and {option or f'val_size={val_size}'} "
            f"would hold out all of them, leaving none to train on; set --data.val_size below {len(unique)}, "
            "or widen the filters"
        )
    val, rest = unique[:val_size], unique[val_size:]
    if train_size is not None and len(rest) < train_size:
        log.warning(
            "%s: only %d problems left for training after %d held out (train_size=%d)",
            name,
            len(rest),
            val_size,
            train_size,
        )
    return rest[:train_size], val
