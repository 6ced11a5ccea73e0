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

Roles are addressed by the names the game declares (``GameSpec.roles``): Agon's ``drafter`` and
``challenger`` as fields (``--model.kl.drafter.beta=0.04``), any other role under ``roles``
(``--model.kl.roles='{judge: {reference: self, beta: 0.04}}'``). An anchor set for a role
the game does not have, a ``rival`` reference of a role with no rival, or of a game with one
policy, is refused at start, naming the game.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agon_lightning.adapters.snapshots import load_into, slot_of
from agon_lightning.game.names import BASE
from agon_lightning.games.base import Game
from agon_lightning.games.records import StepRecord
from agon_lightning.training.features.base import Feature

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
    """Each role's KL anchor (``model.kl``): Agon's ``drafter`` and ``challenger``, and any role by name in ``roles``."""

    drafter: KLAnchor = field(default_factory=KLAnchor)
    challenger: KLAnchor = field(default_factory=KLAnchor)
    roles: dict[str, KLAnchor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        both = sorted({"drafter", "challenger"} & set(self.roles))
        if both:
            raise ValueError(f"model.kl.roles names {both}, which model.kl.{both[0]} sets: give it once")
        self.roles = {k: KLAnchor(**v) if isinstance(v, dict) else v for k, v in self.roles.items()}

    def of(self, role: str) -> KLAnchor:
        """The anchor of ``role`` (an inactive one, β 0, for a role none was given)."""
        if role == "drafter":
            return self.drafter
        if role == "challenger":
            return self.challenger
        return self.roles.get(role, KLAnchor())

    def named(self) -> dict[str, KLAnchor]:
        """Every anchor given, by role."""
        return {"drafter": self.drafter, "challenger": self.challenger, **self.roles}


class KLAnchorFeature(Feature):
    """The run's KL anchors at work: each role's reference at each step (``model.kl``, or ``grpo.kl_beta``).

    Before each update it sets each role's ``reference``, ``(reference adapter, β)``; a ``self``
    reference's snapshot (the adapter at ``version − age``) is loaded into the adapter's ``_ref``
    slot from the run's snapshots.

    Raises:
        ValueError: both ``grpo.kl_beta`` and ``model.kl`` set a KL term (naming the values).
    """

    option = "model.kl"

    def __init__(self, kl: KLAnchors | None, grpo_beta: float) -> None:
        if kl is not None and grpo_beta > 0:
            raise ValueError(
                f"grpo.kl_beta={grpo_beta} and model.kl both set a KL term; give each role's beta in model.kl "
                "and leave grpo.kl_beta at 0"
            )
        self.kl = kl
        self.grpo_beta = grpo_beta

    def anchor(self, role: str) -> KLAnchor:
        """``role``'s anchor: ``model.kl``'s, or ``grpo.kl_beta`` toward the base."""
        return KLAnchor(BASE, self.grpo_beta) if self.kl is None else self.kl.of(role)

    @property
    def active(self) -> bool:
        return self.kl is not None or self.grpo_beta > 0

    @property
    def depth(self) -> int:
        """How many past versions of each adapter the ``self`` references read (0: none)."""
        if self.kl is None:
            return 0
        return max([a.age for a in self.kl.named().values() if a.active and a.reference == "self"], default=0)

    def check(self, game: Game) -> None:
        if self.kl is None:
            return
        spec = game.spec
        for role, anchor in self.kl.named().items():
            if not anchor.active:
                continue
            where = f"model.kl.{role}" if role in ("drafter", "challenger") else f"model.kl.roles.{role}"
            if role not in spec.roles:
                raise ValueError(
                    f"{where} sets a KL term, but the game {game.name} has no role {role!r} (its roles: "
                    f"{list(spec.roles)}); address its roles by those names"
                )
            if anchor.reference == "rival":
                if role not in spec.rivals:
                    raise ValueError(
                        f"{where}.reference='rival', but the game {game.name} declares no rival for role {role!r} "
                        f"(GameSpec.rivals: {dict(spec.rivals)})"
                    )
                if len(spec.policies) == 1:
                    raise ValueError(
                        f"{where}.reference='rival', but the game {game.name} plays every role with one adapter "
                        f"({spec.policies[0]}): its rival is itself"
                    )
        if len(spec.policies) == 1:
            ages = {a.age for a in self.kl.named().values() if a.active and a.reference == "self"}
            if len(ages) > 1:
                raise ValueError(
                    f"model.kl: the game {game.name} plays every role with one adapter, so the 'self' references "
                    f"share one snapshot slot; give them one age, got {sorted(ages)}"
                )

    def slots(self, policies: tuple[str, ...]) -> dict[str, str]:
        """One ``_ref`` slot per policy when any ``self`` reference reads past weights."""
        return {slot_of(a): a for a in policies} if self.depth else {}

    def before_update(self, host: Any, record: StepRecord) -> None:
        if not self.active:
            return
        rivals = host.game.spec.rivals
        for r in record.roles:
            anchor = self.anchor(r.role)
            rival = None
            if anchor.active and anchor.reference == "rival":
                rival = next((o.adapter for o in record.roles if o.role == rivals[r.role]), None)
                if rival is None:
                    raise ValueError(
                        f"step {record.step}: model.kl's 'rival' reference of role {r.role!r} reads role "
                        f"{rivals[r.role]!r}, which the game {host.game.name} did not play this step"
                    )
            r.reference = (reference_adapter(anchor, r.adapter, rival), anchor.beta)
            if anchor.active and anchor.reference == "self":
                _, state = host.adapter_history.at(r.adapter, host.version - anchor.age)
                load_into(host.policy, slot_of(r.adapter), state)


def reference_adapter(anchor: KLAnchor, adapter: str, rival: str | None) -> str | None:
    """The adapter whose log-probs the role's KL term reads (``None``: the base)."""
    if anchor.reference == BASE:
        return None
    if anchor.reference == "self":
        return slot_of(adapter)
    if rival is None:
        raise ValueError(f"the KL reference 'rival' of adapter {adapter!r} needs a rival this step")
    return rival
