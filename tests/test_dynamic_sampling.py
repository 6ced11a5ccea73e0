"""Dynamic sampling: problems whose groups all agree are skipped and replaced, logged, refused where it cannot work.

The verifier is keyed on the problem: a hash of the question makes it always right, never right, or
right when the answer is 0 (the scripted rollout's answers vary by sample), so every batch has
problems whose groups carry no gradient, and some whose groups do. The reward pays correctness
alone (no format term: a truncated completion would otherwise spread a group's rewards).
"""

from __future__ import annotations

import json
import zlib

import lightning as L
import pytest
import torch
from scripted import ScriptedRollout
from test_composition import OwnCopy, build, shipped_games

from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.cli import AgonCLI
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.rewards import CompetitiveReward
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games import AgonGame, GRPOGame
from agon_lightning.games.challenger_solver import ChallengerSolverGame
from agon_lightning.games.records import RoleRollout, StepRecord
from agon_lightning.games.selection import cat_records, select_problems
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.training.features import League
from agon_lightning.training.features.dynamic import (
    DynamicSampling,
    informative,
    replacement_indices,
)
from agon_lightning.training.module import GRPOOptions
from agon_lightning.verifiers.base import Verifier

P, N, TRAIN = 4, 4, 24


def kind(problem: Problem) -> int:
    """0: always right; 1: never right; 2, 3: right when the answer is 0."""
    return zlib.crc32(problem.question.encode()) % 4


class ByKindVerifier(Verifier):
    def verify(self, completion: str, problem: Problem) -> Verdict:
        got = extract_answer(completion)
        k = kind(problem)
        return Verdict(correct=k == 0 or (k >= 2 and got == "0"), extracted=got)


# ----------------------------------------------------------------------------- selecting rows by problem
def batch(texts: list[str], prompt_width: int, completion_width: int) -> RolloutBatch:
    b = len(texts)
    ids = torch.arange(b).unsqueeze(1) + 10  # row i's tokens are all 10 + i
    return RolloutBatch(
        ids.repeat(1, prompt_width), torch.ones(b, prompt_width, dtype=torch.long),
        ids.repeat(1, completion_width) + 100, torch.ones(b, completion_width, dtype=torch.long), texts,
        torch.full((b,), completion_width), torch.zeros(b, dtype=torch.bool), -torch.ones(b, completion_width),
    )  # fmt: skip


def role(name: str, texts: list[str], rewards: list[float], prompt_width: int = 3) -> RoleRollout:
    return RoleRollout(
        name, batch(texts, prompt_width, 2), [Verdict(correct=r > 0) for r in rewards], torch.tensor(rewards),
        role=name, versions=torch.zeros(len(texts), dtype=torch.long),
    )  # fmt: skip


def agon_record(tag: str, prompt_width: int = 3) -> StepRecord:
    """3 problems × 2 rows; each challenge paired (shared) with its problem's first draft."""
    rows = [f"{tag}{p}.{j}" for p in range(3) for j in range(2)]
    return StepRecord(
        step=5,
        problems=[Problem(question=f"{tag}q{p}", answer="0") for p in range(3)],
        draft=role("drafter", [f"d{r}" for r in rows], [1, 0, 1, 1, 0, 0], prompt_width),
        challenge=role("challenger", [f"c{r}" for r in rows], [0, 0, 1, 0, 1, 1], prompt_width),
        summaries=[f"s{r}" for r in rows],
        opponents=torch.tensor([0, 0, 2, 2, 4, 4]),
        reward_terms={"terms": 1.0},
    )


def test_select_problems_keeps_every_roles_rows_summaries_and_renumbered_opponents():
    record = agon_record("a")
    kept = select_problems(record, [2, 0])
    assert [p.question for p in kept.problems] == ["aq2", "aq0"]
    assert kept.draft.rollouts.texts == ["da2.0", "da2.1", "da0.0", "da0.1"]
    assert kept.challenge.rollouts.texts == ["ca2.0", "ca2.1", "ca0.0", "ca0.1"]
    assert kept.draft.rewards.tolist() == [0, 0, 1, 0] and kept.challenge.rewards.tolist() == [1, 1, 0, 0]
    assert [v.correct for v in kept.challenge.verdicts] == [True, True, False, False]
    assert kept.draft.rollouts.prompt_ids[:, 0].tolist() == [14, 15, 10, 11]  # the rows' own tokens
    assert kept.summaries == ["sa2.0", "sa2.1", "sa0.0", "sa0.1"]
    assert kept.opponents.tolist() == [0, 0, 2, 2]  # problem 2's first draft is now row 0
    assert kept.reward_terms == {"terms": 1.0} and len(record.problems) == 3  # the record itself unchanged
    # an opponent of another problem cannot be kept by problem
    record.opponents = torch.tensor([0, 0, 0, 2, 4, 4])
    with pytest.raises(
        ValueError, match=r"a challenge of problem 1 was paired with a draft of another problem"
    ):
        select_problems(record, [1])
    record.summaries = ["one", "two"] * 2
    with pytest.raises(ValueError, match="the summaries has 4 rows, which do not split into 3 problems"):
        select_problems(record, [0])


def test_cat_records_pads_to_a_common_width_and_offsets_the_opponents():
    a, b = select_problems(agon_record("a"), [1]), select_problems(agon_record("b", prompt_width=5), [0, 2])
    both = cat_records([a, b], pad_id=0)
    assert [p.question for p in both.problems] == ["aq1", "bq0", "bq2"]
    assert both.draft.rollouts.texts == ["da1.0", "da1.1", "db0.0", "db0.1", "db2.0", "db2.1"]
    ids, mask = both.draft.rollouts.prompt_ids, both.draft.rollouts.prompt_mask
    assert ids.shape == (6, 5) and mask[:2].tolist() == [[0, 0, 1, 1, 1]] * 2  # left-padded
    assert ids[:2, :2].tolist() == [[0, 0]] * 2 and mask[2:].sum() == 4 * 5
    assert both.draft.rollouts.logprobs.shape == (6, 2) and len(both.draft.verdicts) == 6
    assert both.opponents.tolist() == [
        0,
        0,
        2,
        2,
        4,
        4,
    ]  # each challenge still reads its problem's first draft
    assert both.summaries == ["sa1.0", "sa1.1", "sb0.0", "sb0.1", "sb2.0", "sb2.1"]
    assert both.reward_terms == {"terms": 1.0}


def test_informative_problems_and_replacements_by_hand():
    record = agon_record("a")  # drafts [1,0 | 1,1 | 0,0], challenges [0,0 | 1,0 | 1,1]
    assert informative(record, 2).tolist() == [True, True, False]
    record.challenge.rewards = torch.tensor([0.0, 0, 1, 1, 1, 1])
    assert informative(record, 2).tolist() == [True, False, False]
    picks = replacement_indices(3, 7, 1, 0, 10, 4)
    assert picks == replacement_indices(3, 7, 1, 0, 10, 4) and len(set(picks)) == 4
    others = [
        replacement_indices(*args, 10, 4) for args in ((4, 7, 1, 0), (3, 8, 1, 0), (3, 7, 2, 0), (3, 7, 1, 1))
    ]
    assert all(o != picks for o in others)  # seed, step, draw and rank each change the draw
    assert len(replacement_indices(0, 0, 1, 0, 2, 5)) == 5  # a pool smaller than a batch: with repeats


# ----------------------------------------------------------------------------- fits
class Steps(L.Callback):
    """Each step's loader batch, the problems trained on, and the logged metrics."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.trained: list[list[str]] = []
        self.rows: list[dict[str, float]] = []
        self.records: list[StepRecord] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append([p.question for p in batch])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.records.append(pl_module.last_record)
        self.trained.append([p.question for p in pl_module.last_record.problems])
        self.rows.append({k: float(v) for k, v in trainer.callback_metrics.items()})


def module(model_dir, game=None, max_extra_draws: int = 3, **overrides):
    options = {
        "game": game or GRPOGame(), "grpo": GRPOOptions(num_generations=N), "verifier": ByKindVerifier(),
        "reward": CompetitiveReward(format_weight=0.0, format=None),  # paid for correctness alone
        "features": [DynamicSampling(max_extra_draws=max_extra_draws, seed=1)], **overrides,
    }  # fmt: skip
    return build(model_dir=str(model_dir), **options)


def fit(module, root, steps: int, callbacks=(), ckpt_path=None) -> Steps:
    L.seed_everything(0, verbose=False)
    seen = Steps()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=False,
        enable_checkpointing=bool(callbacks), enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(root), callbacks=[seen, *callbacks],
    )  # fmt: skip
    # Resumed under torch's default weights_only=True: the module's options and its game object load.
    trainer.fit(
        module, ReasoningGymDataModule(train_size=TRAIN, val_size=1, batch_size=P), ckpt_path=ckpt_path
    )
    return seen


def groups_spread(record: StepRecord) -> list[bool]:
    """Per problem trained on: whether some role's group of it has rewards that differ."""
    return [
        any(len(set(r.rewards.view(-1, N)[p].tolist())) > 1 for r in record.roles)
        for p in range(len(record.problems))
    ]


@pytest.mark.parametrize("game", [GRPOGame(), AgonGame(pairing="shared")], ids=["grpo", "agon_shared"])
def test_problems_whose_groups_agree_are_skipped_refilled_and_logged(game, tiny_model_dir, tmp_path):
    m = module(tiny_model_dir, game)
    seen = fit(m, tmp_path, steps=3)
    pool = {p.question: p for p in m.trainer.datamodule.train_problems}
    for batch, trained, row, record in zip(seen.batches, seen.trained, seen.rows, seen.records):
        assert all(groups_spread(record)), "every problem trained on carries a gradient"
        assert not [q for q in trained if kind(pool[q]) < 2], "always- and never-right problems are skipped"
        skipped = [q for q in batch if q not in trained]
        assert {q for q in batch if kind(pool[q]) < 2} <= set(skipped)
        assert row["dynamic/skipped_share"] == len(skipped) / P
        assert row["dynamic/kept"] == len(trained) <= P
        assert all(len(r.rollouts) == N * len(trained) for r in record.roles)
        if row["dynamic/extra_draws"] == 0:
            assert not skipped
        assert row["train/frac_zero_std_groups"] < 1.0
    assert any(r["dynamic/skipped_share"] > 0 for r in seen.rows), "the verifier no longer makes groups agree"
    refilled = [q for b, t in zip(seen.batches, seen.trained) for q in t if q not in b]
    assert refilled, "no refill was played"
    assert [r["dynamic/extra_draws_total"] for r in seen.rows][-1] == sum(
        r["dynamic/extra_draws"] for r in seen.rows
    )
    assert m.policy_version == 3


QUALIFYING = {name: game for name, game in shipped_games().items() if name != "challenger_solver"}


@pytest.mark.parametrize("name", QUALIFYING)
def test_every_shipped_game_with_p_times_n_rows_trains_with_it(name, tiny_model_dir, tmp_path):
    seen = fit(module(tiny_model_dir, QUALIFYING[name]), tmp_path, steps=2)
    assert [len(t) for t in seen.trained] == [r["dynamic/kept"] for r in seen.rows]
    for record in seen.records:
        assert all(groups_spread(record)) and all(
            len(r.rollouts) == N * len(record.problems) for r in record.roles
        )


def test_a_step_with_nothing_informative_trains_its_first_play_as_it_is(tiny_model_dir, tmp_path):
    class NeverRight(Verifier):
        def verify(self, completion: str, problem: Problem) -> Verdict:
            return Verdict(correct=False)

    seen = fit(module(tiny_model_dir, max_extra_draws=1, verifier=NeverRight()), tmp_path, steps=1)
    assert seen.trained == seen.batches  # nothing better was found: the step as it was drawn
    assert seen.rows[0]["dynamic/kept"] == 0 and seen.rows[0]["dynamic/extra_draws"] == 1
    assert seen.rows[0]["dynamic/skipped_share"] == 1.0


# ----------------------------------------------------------------------------- refusals
def test_refusals_name_the_option_and_what_it_meets(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"DynamicSampling.max_extra_draws must be >= 0 \(0: off\), got -1"):
        DynamicSampling(max_extra_draws=-1)
    at_construction = {  # beside features it cannot run with: refused when the module is built
        "league": (
            lambda: module(tiny_model_dir, AgonGame(), league=League(probability=0.5)),
            r"DynamicSampling\(max_extra_draws=3\) .* model.league.probability=0.5",
        ),
        "ahead": (
            lambda: module(
                tiny_model_dir,
                rollout=OwnCopy(max_staleness=1),
                grpo=GRPOOptions(num_generations=N, tis_cap=2.0),
            ),
            r"DynamicSampling\(max_extra_draws=3\) .* rollout.max_staleness=1",
        ),
    }
    for name, (make, words) in at_construction.items():
        with pytest.raises(ValueError, match=words) as e:
            make()
        assert "\n" not in str(e.value), name
    # a role of P·N·m rows: refused at its first step
    solver = module(tiny_model_dir, ChallengerSolverGame(), rollout=ScriptedRollout(max_new_tokens=16))
    with pytest.raises(
        ValueError,
        match=r"step 0: .*DynamicSampling .* the game ChallengerSolverGame's role 'solver' has 64 rows",
    ) as e:
        fit(solver, tmp_path / "solver", steps=1)
    assert "\n" not in str(e.value)


def test_the_command_line_takes_it_in_model_features():
    feature = {
        "class_path": "agon_lightning.training.features.dynamic.DynamicSampling",
        "init_args": {"max_extra_draws": 2},
    }
    cli = AgonCLI(
        args=["--config", "configs/agon.yaml", f"--model.features=[{json.dumps(feature)}]"], run=False
    )
    (dynamic,) = [f for f in cli.model.features if isinstance(f, DynamicSampling)]
    assert dynamic.options.max_extra_draws == 2 and dynamic.active


# ----------------------------------------------------------------------------- resume
class Killed(Exception):
    pass


class KillAtStep(L.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Killed(f"killed as step {self.step} starts")


def test_a_killed_run_resumed_plays_the_refills_an_unbroken_run_played(tiny_model_dir, tmp_path):
    save = {"every_n_train_steps": 1, "bundles": False, "monitor": None, "save_top_k": 0}
    straight = fit(module(tiny_model_dir), tmp_path / "straight", steps=4)
    root = tmp_path / "killed"
    with pytest.raises(Killed):
        fit(module(tiny_model_dir), root, 4, [AgonCheckpoint(**save), KillAtStep(2)])
    resumed = module(tiny_model_dir)
    after = fit(resumed, root, 4, [AgonCheckpoint(**save)], ckpt_path=str(root / "checkpoints" / "last.ckpt"))
    assert after.batches == straight.batches[2:]
    assert after.trained == straight.trained[2:], "the same refills"
    keys = [k for k in straight.rows[0] if k.startswith("dynamic/") or k == "train/loss"]
    assert [{k: r[k] for k in keys} for r in after.rows] == [
        {k: r[k] for k in keys} for r in straight.rows[2:]
    ]
    assert straight.rows[-1]["dynamic/extra_draws_total"] > straight.rows[1]["dynamic/extra_draws_total"] > 0
