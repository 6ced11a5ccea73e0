"""The KL anchor, per role: which policy each role's KL term pulls toward, and how hard.

GRPO's KL term pulls the policy toward the frozen base. In a game, each role can have its own
anchor (``model.kl``):

- ``base``: the frozen base (adapters off), as ``grpo.kl_beta`` does for both roles;
- ``self``: the adapter playing the role, as it was ``age`` updates ago (a snapshot in a frozen
  slot, :mod:`agon_lightning.adapters.snapshots`): a trust region that moves with the policy;
- ``rival``: the other adapter, as it is now: keeps the pair from drifting apart (a
  reference the game's divergence monitor reads as a distance).

Each role has its own β. Every reference is an adapter of the one base (or the base itself),
never a second copy of the model. ``beta: 0`` is no KL term and no reference forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from agon_lightning.adapters.snapshots import AdapterHistory, load_into, slot_of
from agon_lightning.game.names import BASE

REFERENCES = (BASE, "self", "rival")  # BASE: "base", the frozen base


@dataclass
class KLAnchor:
    """One role's KL term.

    Attributes:
        reference: ``base`` | ``self`` | ``rival`` (see the module's docstring).
        beta: β, the KL term's weight for this role (k3 estimator, as ``grpo.kl_beta``).
        age: For ``self``: k, how many updates ago the snapshot was taken (>= 1; at the start of
            training, when fewer updates were taken, the adapter's initial weights).
    """

    reference: str = BASE
    beta: float = 0.0
    age: int = 1

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"kl reference must be one of {REFERENCES}, got {self.reference!r}")
        if self.beta < 0:
            raise ValueError(f"kl beta must be >= 0, got {self.beta}")
        if self.age < 1:
            raise ValueError(f"kl age must be >= 1 (updates ago), got {self.age}")

    @property
    def active(self) -> bool:
        return self.beta > 0


@dataclass
class KLAnchors:
    """Each role's KL anchor (``model.kl``): ``drafter`` and ``challenger``."""

    drafter: KLAnchor = field(default_factory=KLAnchor)
    challenger: KLAnchor = field(default_factory=KLAnchor)

    def of(self, role: str) -> KLAnchor:
        """The anchor of ``role`` (``drafter`` or ``challenger``)."""
        if role not in ("drafter", "challenger"):
            raise ValueError(f"no KL anchor for role {role!r}")
        return self.drafter if role == "drafter" else self.challenger

    @property
    def snapshot_depth(self) -> int:
        """How many past versions of each adapter the ``self`` references read (0: none)."""
        return max(
            [a.age for a in (self.drafter, self.challenger) if a.active and a.reference == "self"], default=0
        )


def resolve(kl: KLAnchors | None, grpo_beta: float, game: str, schedule: str) -> KLAnchors:
    """The run's anchors: ``model.kl`` as given, or ``grpo.kl_beta`` toward the base for both roles.

    Raises:
        ValueError: both set a KL term, or a reference the game cannot give (naming the value).
    """
    if kl is None:
        return KLAnchors(KLAnchor(BASE, grpo_beta), KLAnchor(BASE, grpo_beta))
    if grpo_beta > 0:
        raise ValueError(
            f"grpo.kl_beta={grpo_beta} and model.kl both set a KL term; give each role's beta in model.kl "
            "and leave grpo.kl_beta at 0"
        )
    roles = ("drafter",) if game == "grpo" else ("drafter", "challenger")
    for role in roles:
        anchor = kl.of(role)
        if anchor.active and anchor.reference == "rival":
            if game == "grpo":
                raise ValueError(
                    f"model.kl.{role}.reference='rival', but the game (kind 'grpo') has no challenger"
                )
            if schedule == "self_play":
                raise ValueError(
                    f"model.kl.{role}.reference='rival', but schedule='self_play' plays both roles with one "
                    "adapter: its rival is itself"
                )
    if schedule == "self_play" or game == "grpo":
        ages = {kl.of(r).age for r in roles if kl.of(r).active and kl.of(r).reference == "self"}
        if len(ages) > 1:
            raise ValueError(
                f"model.kl: with one adapter in both roles, the 'self' references share one snapshot slot; "
                f"give them one age, got {sorted(ages)}"
            )
    return kl


def reference_adapter(anchor: KLAnchor, adapter: str, rival: str | None) -> str | None:
    """The adapter whose log-probs the role's KL term reads (``None``: the base)."""
    if anchor.reference == BASE:
        return None
    if anchor.reference == "self":
        return slot_of(adapter)
    if rival is None:
        raise ValueError(f"the KL reference 'rival' of adapter {adapter!r} needs a rival this step")
    return rival


class RoleAnchors:
    """The run's KL anchors at work: each role's reference at each step.

    The module asks it for each role's ``(reference adapter, β)`` before an update; a ``self``
    reference reads the adapters' past weights from the run's :class:`AdapterHistory` (sized
    by :attr:`depth`) and loads them into the adapter's ``_ref`` slot.
    """

    def __init__(self, kl: KLAnchors | None, grpo_beta: float, game: str, schedule: str) -> None:
        self.kl = resolve(kl, grpo_beta, game, schedule)

    @property
    def depth(self) -> int:
        """How many past versions of each adapter the ``self`` references read (0: none)."""
        return self.kl.snapshot_depth

    def slots(self, adapters: tuple[str, ...]) -> dict[str, str]:
        """The snapshot slots the references need: slot → adapter (one per adapter with a ``self`` reference)."""
        return {slot_of(a): a for a in adapters} if self.depth else {}

    def references(
        self, policy: nn.Module, roles: list[Any], version: int, history: AdapterHistory | None
    ) -> list[tuple[str | None, float]]:
        """Each role's KL term this step, ``(reference adapter, β)``, for roles with ``.role`` and ``.adapter``.

        A ``self`` reference's snapshot (its adapter at ``version − age``) is loaded into its slot.
        """
        adapters = [r.adapter for r in roles]
        references = []
        for r in roles:
            anchor = self.kl.of(r.role)
            rival = next((a for a in adapters if a != r.adapter), None)
            references.append((reference_adapter(anchor, r.adapter, rival), anchor.beta))
            if anchor.active and anchor.reference == "self":
                assert history is not None  # the module sizes the history by self.depth
                _, state = history.at(r.adapter, version - anchor.age)
                load_into(policy, slot_of(r.adapter), state)
        return references
