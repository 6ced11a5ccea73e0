"""Games of several LoRA policies on one base: the contract (a :class:`GameSpec`, the :class:`Player`
a game calls) and the games shipped (entry-point group ``agon_lightning.games``).

- :mod:`~agon_lightning.games.spec`: what a game declares; :mod:`~agon_lightning.games.player`:
  what it may call; :mod:`~agon_lightning.games.base`: :class:`Game`; :mod:`~agon_lightning.games.records`:
  what a step played;
- :mod:`~agon_lightning.games.agon`: Agon and GRPO; :mod:`~agon_lightning.games.schedule`: Agon's roles
  and pairings;
- the games shipped beside them: :mod:`~agon_lightning.games.prover_verifier` (prover–verifier),
  :mod:`~agon_lightning.games.debate` (two debaters and a judge, k rounds),
  :mod:`~agon_lightning.games.challenger_solver` (after R-Zero) and :mod:`~agon_lightning.games.zero_sum`
  (zero-sum self-play with role-conditioned advantages, after SPIRAL).
"""

from agon_lightning.games.agon import AgonGame, GRPOGame, as_game
from agon_lightning.games.base import Game, draft_stage
from agon_lightning.games.player import Player, Rival
from agon_lightning.games.records import RoleRollout, StepRecord, rows_of
from agon_lightning.games.spec import GameSpec

__all__ = [
    "AgonGame", "GRPOGame", "Game", "GameSpec", "Player", "Rival", "RoleRollout", "StepRecord", "as_game",
    "draft_stage", "rows_of",
]  # fmt: skip
