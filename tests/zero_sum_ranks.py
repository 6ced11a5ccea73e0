"""One rank of tests/test_game_zero_sum.py's two-process case: a small module, so the spawned process starts fast."""

from __future__ import annotations

import torch
import torch.distributed as dist

from agon_lightning.games.records import RoleRollout
from agon_lightning.games.zero_sum import FIRST, SECOND, ZeroSumGame
from agon_lightning.training.options import GRPOOptions


def baselines_on_rank(rank: int, port: int, out) -> None:
    """Two steps of the game's advantages on this rank's rows; puts ``(rank, baselines)`` on ``out``."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        game = ZeroSumGame(decay=0.5)
        # rank 0's first side wins everything, rank 1's loses everything: the ranks' own means are 1 and -1
        sign = 1.0 if rank == 0 else -1.0
        for _ in range(2):
            first = RoleRollout("alpha", None, [], torch.tensor([sign] * 4), role=FIRST)
            second = RoleRollout("alpha", None, [], torch.tensor([-sign] * 2), role=SECOND)
            game.advantages([first, second], 2, GRPOOptions())
        out.put((rank, dict(game.baselines)))
    finally:
        dist.destroy_process_group()
