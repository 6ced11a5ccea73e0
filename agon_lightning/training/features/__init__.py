"""Features of training as plug-ins (:class:`~agon_lightning.training.features.base.Feature`).

- :mod:`~agon_lightning.training.features.history`: each policy's past versions (snapshots);
- :mod:`~agon_lightning.training.features.kl`: each role's KL anchor (``model.kl``);
- :mod:`~agon_lightning.training.features.league`: past rivals (``model.league``);
- :mod:`~agon_lightning.training.features.ahead`: the first stage sampled a step ahead
  (``rollout.max_staleness``);
- :mod:`~agon_lightning.training.features.dynamic`: dynamic sampling (after DAPO): problems whose
  groups all agree skipped and replaced (``model.features``, not built in).

:func:`build_features` puts a run's together and checks each against the game.
"""

from __future__ import annotations

from agon_lightning.games.base import Game
from agon_lightning.rollout.base import Rollout
from agon_lightning.training.features.ahead import SampleAhead
from agon_lightning.training.features.base import Feature, Features
from agon_lightning.training.features.history import NoSnapshots, Snapshots
from agon_lightning.training.features.kl import KLAnchor, KLAnchorFeature, KLAnchors
from agon_lightning.training.features.league import League, LeaguePlay
from agon_lightning.training.options import GRPOOptions

__all__ = [
    "Feature", "Features", "KLAnchor", "KLAnchorFeature", "KLAnchors", "League", "LeaguePlay", "NoSnapshots",
    "SampleAhead", "Snapshots", "build_features",
]  # fmt: skip


def build_features(
    game: Game,
    kl: KLAnchors | None,
    league: League | None,
    rollout: Rollout,
    grpo: GRPOOptions,
    extra: list[Feature] | None = None,
) -> Features:
    """The run's features, in hook order (snapshots first), each checked against ``game``.

    The snapshots are kept as deep as the deepest reader needs, and only when one reads them;
    ``Features.history`` is theirs (``None``: none kept).

    Raises:
        ValueError: a feature that cannot apply to the game (naming both), or settings at odds.
    """
    plugins: list[Feature] = [
        KLAnchorFeature(kl, grpo.kl_beta),
        LeaguePlay(league),
        SampleAhead(rollout, grpo.tis_cap is not None, grpo.num_iterations),
        *(extra or []),
    ]
    depth = max((f.depth for f in plugins), default=0)
    snapshots = Snapshots(depth) if depth else NoSnapshots()
    features = Features([snapshots, *plugins])
    features.history = snapshots.history if isinstance(snapshots, Snapshots) else None
    features.check(game)
    return features
