"""Every feature composes with every game, or refuses at start in one message naming both.

The matrix: each shipped game, and games written as a user would (tests/engine_games.py), × each
feature (the league; a KL anchor toward the base, the role's own past, the rival; sampling ahead
at ``max_staleness=1``; ``num_iterations=2``; ``tis_cap``), each a 3-step fit on the tiny model
with the scripted rollout. A cell either refuses at construction (the expected ones are listed
below, with the words their message must hold) or trains three steps and shows the feature at
work in what it logs. Then the four ways features used to fail off the shipped games, each as a test.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from engine_games import DebateIgnoringRivalsGame, DebateNoRivalsGame, JudgeGame, OwnFirstStageGame, PanelGame
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.games import AgonGame, GRPOGame
from agon_lightning.games.challenger_solver import ChallengerSolverGame
from agon_lightning.games.debate import DebateGame
from agon_lightning.games.prover_verifier import ProverVerifierGame
from agon_lightning.games.zero_sum import ZeroSumGame
from agon_lightning.training.features import KLAnchor, KLAnchors, League
from agon_lightning.training.module import AgonModule, GRPOOptions

N, P, STEPS = 2, 2, 3


class OwnCopy(ScriptedRollout):
    """Scripted completions with sampling log-probs, from "its own copy" of the weights: it can sample ahead."""

    keeps_own_weights = True

    def __init__(self, max_staleness: int = 0) -> None:
        super().__init__(max_new_tokens=16)
        self._keep_staleness(max_staleness)

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        batch = super().generate(model, tokenizer, prompts, num_samples)
        batch.logprobs = -1.0 * batch.completion_mask.float()
        return batch

    def generate_ahead(self, model, tokenizer, prompts, num_samples, adapter_names):
        return self.generate(model, tokenizer, prompts, num_samples)


def shipped_games() -> dict:
    """Every game the package registers (entry-point group ``agon_lightning.games``), and Agon's self-play."""
    return {
        "agon": AgonGame(), "grpo": GRPOGame(), "self_play": AgonGame(schedule="self_play"),
        "prover_verifier": ProverVerifierGame(), "debate": DebateGame(), "challenger_solver": ChallengerSolverGame(),
        "zero_sum": ZeroSumGame(),
    }  # fmt: skip


GAMES = {
    **shipped_games(),
    "own_first_stage": OwnFirstStageGame(),
    "judge": JudgeGame(),
    "panel": PanelGame(),
}


def anchors(game, reference: str) -> KLAnchors:
    """``reference`` as the KL anchor of every role (with ``rival``: of every role that has a rival, if any)."""
    spec = game.spec
    roles = (
        [r for r in spec.roles if r in spec.rivals] if reference == "rival" and spec.rivals else spec.roles
    )
    named = {r: KLAnchor(reference, 0.2, age=1) for r in roles}
    return KLAnchors(
        drafter=named.pop("drafter", KLAnchor()), challenger=named.pop("challenger", KLAnchor()), roles=named
    )


FEATURES = {
    "league": lambda game: {"league": League(probability=1.0, max_age=2, seed=0)},
    "kl_base": lambda game: {"kl": anchors(game, "base")},
    "kl_self": lambda game: {"kl": anchors(game, "self")},
    "kl_rival": lambda game: {"kl": anchors(game, "rival")},
    "max_staleness": lambda game: {
        "rollout": OwnCopy(max_staleness=1),
        "grpo": GRPOOptions(num_generations=N, tis_cap=2.0),
    },
    "num_iterations": lambda game: {"grpo": GRPOOptions(num_generations=N, num_iterations=2)},
    "tis_cap": lambda game: {"grpo": GRPOOptions(num_generations=N, tis_cap=2.0)},
}

# (game, feature) → the words the refusal names; every other cell trains.
REFUSED = {
    ("grpo", "league"): "the game GRPOGame declares no rivals",
    ("grpo", "kl_rival"): "model.kl.drafter.reference='rival', but the game GRPOGame declares no rival",
    (
        "self_play",
        "kl_rival",
    ): "but the game AgonGame plays every role with one adapter (alpha): its rival is itself",
    (
        "own_first_stage",
        "max_staleness",
    ): "but the game OwnFirstStageGame samples its own (GameSpec.first_stage is None)",
    ("judge", "league"): "the game JudgeGame declares no rivals",
    ("challenger_solver", "league"): "the game ChallengerSolverGame declares no rivals",
    (
        "challenger_solver",
        "kl_rival",
    ): "model.kl.challenger.reference='rival', but the game ChallengerSolverGame declares no rival",
    (
        "challenger_solver",
        "max_staleness",
    ): "but the game ChallengerSolverGame samples its own (GameSpec.first_stage is None)",
    (
        "zero_sum",
        "kl_rival",
    ): "but the game ZeroSumGame plays every role with one adapter (alpha): its rival is itself",
    (
        "judge",
        "kl_rival",
    ): "model.kl.roles.prover.reference='rival', but the game JudgeGame declares no rival",
}


class Metrics(L.Callback):
    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.pushed: set[str] = set()  # adapters some row of some role had a non-zero advantage for

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rows.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.pushed |= {r.adapter for r in pl_module.last_record.roles if bool(r.advantages.abs().sum() > 0)}


def build(game, **overrides) -> AgonModule:
    arguments = {
        "model_name_or_path": overrides.pop("model_dir"), "game": game,
        "lora": LoraOptions(r=2, target_modules=["q_proj", "v_proj"]), "grpo": GRPOOptions(num_generations=N),
        "rollout": OwnCopy(), "verifier": ZeroIsRight(), "optimizer": lambda p: torch.optim.SGD(p, lr=0.5),
        "validate_at_start": False,
    }  # fmt: skip
    return AgonModule(**{**arguments, **overrides})


def fit(module: AgonModule, root, steps: int = STEPS) -> Metrics:
    L.seed_everything(0, verbose=False)
    metrics = Metrics()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(root), callbacks=[metrics],
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=4 * P * STEPS, val_size=1, batch_size=P))
    return metrics


def adapters(module: AgonModule) -> dict[str, torch.Tensor]:
    return {
        n: torch.cat([p.detach().flatten().clone() for p in ps]) for n, ps in module.adapter_params.items()
    }


def shows(feature: str, module: AgonModule, rows: list[dict[str, float]]) -> None:
    """What each feature leaves in a 3-step run's metrics when it is at work."""
    if feature == "league":
        assert all("league/played" in r for r in rows)
        assert any(r["league/played"] == 1.0 for r in rows[1:])  # a past rival exists after the first update
    elif feature.startswith("kl_"):
        assert any(r.get("train/kl", 0.0) > 0 for r in rows), [r.get("train/kl") for r in rows]
    elif feature == "max_staleness":
        assert [r["rollout/staleness"] for r in rows][1:] == [1.0] * (STEPS - 1)  # drafted a step ahead
    elif feature == "num_iterations":
        assert module.trainer.global_step == 2 * STEPS and module.policy_version == STEPS
    elif feature == "tis_cap":
        assert all("train/ess" in r and "train/tis_clip_fraction" in r for r in rows)


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("name", GAMES)
def test_every_feature_composes_with_every_game_or_refuses_at_start(name, feature, tiny_model_dir, tmp_path):
    game = GAMES[name]
    options = FEATURES[feature](game)
    if (name, feature) in REFUSED:
        with pytest.raises(ValueError) as refused:
            build(game, model_dir=str(tiny_model_dir), **options)
        message = str(refused.value)
        assert REFUSED[(name, feature)] in message and "\n" not in message
        return
    module = build(game, model_dir=str(tiny_model_dir), **options)
    module.configure_model()
    before = adapters(module)
    metrics = fit(module, tmp_path)
    rows = metrics.rows
    assert len(rows) == STEPS and module.policy_version == STEPS
    after = adapters(module)
    moved = {a for a in module.adapter_names if not torch.equal(before[a], after[a])}
    assert metrics.pushed and metrics.pushed <= moved, "every policy with an advantage trained"
    if not feature.startswith("kl_"):  # (a KL term moves a policy by itself)
        assert moved == metrics.pushed, "and no other"
    shows(feature, module, rows)


def test_every_refusal_in_the_table_is_a_cell_of_the_matrix():
    assert {g for g, _ in REFUSED} <= set(GAMES) and {f for _, f in REFUSED} <= set(FEATURES)


# ----------------------------------------------------------------------------- the four failures
def test_a_prover_verifier_game_without_rivals_is_refused_by_the_league_naming_both(tiny_model_dir):
    with pytest.raises(ValueError, match="model.league .* but the game JudgeGame declares no rivals"):
        build(JudgeGame(), model_dir=str(tiny_model_dir), league=League(probability=0.5))


def test_a_debate_is_never_a_silent_league_no_op(tiny_model_dir, tmp_path):
    # Declaring no rivals: refused at start, before any slot is reserved or history kept.
    with pytest.raises(ValueError, match="the game DebateNoRivalsGame declares no rivals"):
        build(DebateNoRivalsGame(), model_dir=str(tiny_model_dir), league=League(probability=1.0))
    # Declaring a rival and never asking for one: stopped at the first step the league plays.
    module = build(DebateIgnoringRivalsGame(), model_dir=str(tiny_model_dir), league=League(probability=1.0))
    with pytest.raises(
        ValueError, match="step 0: model.league plays this step, but the game DebateIgnoringRivalsGame"
    ):
        fit(module, tmp_path, steps=1)


def test_a_game_sampling_its_own_first_stage_gets_the_self_kl_anchor(tiny_model_dir, tmp_path):
    kl = KLAnchors(roles={"opener": KLAnchor("self", 0.2, age=1)})
    module = build(OwnFirstStageGame(), model_dir=str(tiny_model_dir), kl=kl)
    rows = fit(module, tmp_path).rows
    assert rows[0]["train/kl"] == 0.0 and rows[-1]["train/kl"] > 0  # the snapshot of one update ago
    assert module.adapter_history.versions("alpha") == [1, 2]  # kept before steps 1 and 2 (depth 1)


def test_agons_metrics_are_agons_a_judging_game_logs_none_of_them(tiny_model_dir, tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    from callbacks.divergence import DivergenceMonitor

    module = build(JudgeGame(), model_dir=str(tiny_model_dir))
    monitor = DivergenceMonitor(every_n_steps=1, num_probes=1)
    L.seed_everything(0, verbose=False)
    logger = CSVLogger(str(tmp_path), name="judge")
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=logger,
        log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path), callbacks=[monitor],
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=8, val_size=2, batch_size=P))
    header = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()[0]
    logged = set(header.split(","))
    assert {"train/prover/accuracy", "train/verifier/accuracy"} <= logged
    assert not {"train/conversion_rate", "train/regression_rate", "train/drafter"} & logged
    assert module.last_record.sparse_metrics == {}  # no counts of Agon's exchange, nothing sparse
    assert "divergence/answer_agreement" not in logged  # a yes/no is not an answer to compare
    assert "divergence/kl_alpha_base" in logged  # the monitor still runs


def test_a_league_role_the_game_never_asks_a_rival_for_stops_the_run_naming_it(tiny_model_dir, tmp_path):
    # The debate asks the league for debater_b's rival only; a league for debater_a would never play.
    module = build(
        DebateGame(), model_dir=str(tiny_model_dir), league=League(probability=1.0, roles=["debater_a"])
    )
    with pytest.raises(
        ValueError, match=r"did not ask a rival for role\(s\) \['debater_a'\] \(model.league.roles\)"
    ):
        fit(module, tmp_path, steps=1)
