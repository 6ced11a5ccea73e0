"""``agon sweep``: variant overlays, the run grid, resuming, the budget arithmetic, the report."""

import csv
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from agon_lightning.cli import AgonCLI
from agon_lightning.experiments.sweep import (
    AGON,
    DEFAULT_VARIANTS,
    MARKER,
    STARTED,
    plan,
    report,
    sweep,
    sweep_main,
)
from agon_lightning.experiments.sweep_report import compare, plot_curves, read_run
from agon_lightning.training.validation import CascadeEvaluator

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "configs" / "agon.yaml"
EXPERIMENTS = ROOT / "configs" / "experiments"


# ---------------------------------------------------------------------- the overlays
def parsed(capsys, *configs: Path) -> dict:
    args = ["fit", *(a for c in configs for a in ("--config", str(c))), "--print_config"]
    with pytest.raises(SystemExit) as exit_info:
        AgonCLI(args=args)
    out = capsys.readouterr()
    assert exit_info.value.code in (0, None), out.err[-2000:]
    config = yaml.safe_load(out.out)
    config.pop("config", None)
    return config


def flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


EXPECTED = {  # what each overlay must set, on top of "shares everything else"
    "agon": {},
    "grpo": {"model.game": "grpo", "model.grpo.num_generations": 16, "model.evaluate_self_cascade": True},
    "grpo_self_cascade": {
        "model.game": "grpo",
        "model.grpo.num_generations": 16,
        "model.evaluate_self_cascade": True,
        "model.deployed": "cascade_aa",
    },
    "grpo_n": {"model.game": "grpo", "model.grpo.num_generations": 8},
    "cooperative": {"model.reward.class_path": "agon_lightning.game.rewards.CorrectnessReward"},
    "no_exchange": {
        "model.summarizer.class_path": "agon_lightning.summarizers.basic.HiddenSummarizer",
        "model.prompts.challenge": "{question}{summary}",  # exactly the drafter's prompt
    },
    "fixed_roles": {"model.schedule": "fixed"},
    "self_play": {"model.schedule": "self_play"},
    "moa_untrained": {"model.game": "grpo", "model.evaluate_moa": True},
    "zero_shot": {"model.game": "grpo"},
    "self_refine": {
        "model.schedule": "self_play",
        "model.reward.class_path": "agon_lightning.game.rewards.CorrectnessReward",
    },
    "shared_opponent": {
        "model.pairing": "shared",
        "model.summarizer.class_path": "agon_lightning.summarizers.basic.HiddenSummarizer",
        "model.prompts.challenge": "{question}{summary}",
    },
    "margin": {"model.reward.init_args.form": "margin"},
    "league": {
        "model.league.probability": 0.25,
        "model.league.max_age": 10,
        "model.league.rule": "pfsp",
        "model.league.pfsp_power": 2.0,
    },  # fmt: skip
    "kl_anchor": {
        "model.kl.drafter.reference": "self",
        "model.kl.drafter.beta": 0.02,
        "model.kl.drafter.age": 10,
        "model.kl.challenger.reference": "rival",
        "model.kl.challenger.beta": 0.02,
        "model.kl.challenger.age": 1,
        "model.kl.roles": {},  # no role beyond Agon's
    },  # fmt: skip
    "tiebreak": {"model.reward.init_args.length_tiebreak": 0.5},
    # the games shipped beside Agon, for the exploratory games table (benchmarks/results/countdown/games)
    "prover_verifier": {"model.game.class_path": "agon_lightning.games.prover_verifier.ProverVerifierGame"},
    "debate": {
        "model.game.class_path": "agon_lightning.games.debate.DebateGame",
        "model.game.init_args.rounds": 2,
        "model.game.init_args.judge": "adapter",
    },
    "challenger_solver": {
        "model.game.class_path": "agon_lightning.games.challenger_solver.ChallengerSolverGame",
        "model.game.init_args.solver_samples": 4,
    },
    "zero_sum": {"model.game.class_path": "agon_lightning.games.zero_sum.ZeroSumGame"},
    "other_summary": {  # a control: another problem's summary, through the Countdown summarizer
        "model.summarizer.class_path": "agon_lightning.summarizers.other.OtherProblemSummarizer",
        "model.summarizer.init_args.summarizer.class_path": "agon_lightning.testbeds.countdown.summarizer.CountdownSummarizer",
    },
}


def test_every_shipped_variant_is_checked_here():
    assert {p.stem for p in EXPERIMENTS.glob("*.yaml")} == set(EXPECTED)
    assert set(DEFAULT_VARIANTS) <= set(EXPECTED)


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_variant_overlay_changes_only_what_it_names(variant, capsys):
    base = flatten(parsed(capsys, BASE))
    merged = flatten(parsed(capsys, BASE, EXPERIMENTS / f"{variant}.yaml"))
    changed = {k for k in base.keys() | merged.keys() if base.get(k) != merged.get(k)}
    expected = EXPECTED[variant]
    for key, value in expected.items():
        assert merged[key] == value, key
    # Anything else that differs lies under a changed component (its init_args), or is the name it replaced.
    owners = {k.rsplit(".", 1)[0] for k in expected if k.endswith(".class_path")}
    stray = {k for k in changed - expected.keys() if not any(k == o or k.startswith(o + ".") for o in owners)}
    assert not stray, f"{variant} also changes {sorted(stray)}"
    if variant == "no_exchange":  # the bonus still pays against the hidden draft
        assert merged["model.reward.init_args.conversion_bonus"] > 0
        # ... and the challenger reads exactly the drafter's prompt: one the base was trained on.
        from agon_lightning.game.prompts import Prompts
        from agon_lightning.game.types import Problem
        from agon_lightning.infra.tiny import build_tokenizer
        from agon_lightning.summarizers.basic import HiddenSummarizer

        prompts = Prompts(draft=merged["model.prompts.draft"], challenge=merged["model.prompts.challenge"])
        tok, problem = build_tokenizer(), Problem("12 + 30 - 7 =", "35")
        summary = HiddenSummarizer().summarize("<think>12+30=42</think>42<answer>35</answer>", problem)
        assert prompts.challenge_prompt(tok, problem, summary) == prompts.draft_prompt(tok, problem)
    if variant == "grpo":  # budget matching: 2N rollouts per problem, as Agon's N drafts + N challenges
        assert merged["model.grpo.num_generations"] == 2 * base["model.grpo.num_generations"]


# ---------------------------------------------------------------------- the grid
def test_plan_runs_eval_only_variants_once_and_names_unknown_ones(tmp_path):
    runs = plan(["agon", "moa_untrained", "agon"], [0, 1, 1], tmp_path, EXPERIMENTS)
    assert [(r.variant, r.seed) for r in runs] == [("agon", 0), ("moa_untrained", 0), ("agon", 1)]
    assert runs[2].directory == tmp_path / "agon" / "seed_1"
    with pytest.raises(ValueError, match=r"'agonn'.*available: \[.*'cooperative'"):
        plan(["agonn"], [0], tmp_path, EXPERIMENTS)


def test_run_arguments_seed_three_ways_and_overrides_win(tmp_path):
    fit, moa = plan(["agon", "moa_untrained"], [7], tmp_path, EXPERIMENTS)
    argv = fit.argv(BASE, ["--trainer.limit_train_batches=3"])
    assert argv[:5] == ["fit", "--config", str(BASE), "--config", str(EXPERIMENTS / "agon.yaml")]
    for arg in ("--seed_everything=7", "--data.init_args.seed=7", "--model.lora.init_seed=7",
                f"--trainer.default_root_dir={tmp_path / 'agon' / 'seed_7'}"):  # fmt: skip
        assert arg in argv
    assert argv[-1] == "--trainer.limit_train_batches=3"
    assert moa.argv(BASE, [])[0] == "validate" and moa.metric_key == "moa"


def test_dry_run_prints_pending_commands_only(tmp_path, capsys):
    sweep_main(["--variants", "grpo", "moa_untrained", "--seeds", "0", "1", "--out", str(tmp_path),
                "--base-config", str(BASE), "--experiments-dir", str(EXPERIMENTS), "--dry-run", "--", "--x=1"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["fit", "validate", "fit"]
    assert all(line.endswith("--x=1") for line in lines)
    assert not list(tmp_path.iterdir()), "a dry run wrote something"


# ---------------------------------------------------------------------- runs on disk
def write_run(directory: Path, evals: list[tuple[int, float, float]], steps: int, challenge: bool = True,
              n: int = 4, p: int = 2, key: str = "deployed", final: dict | None = None) -> None:  # fmt: skip
    """A finished-looking run: metrics.csv (draft length 10, challenge 5 each step; ``final``: more
    metrics of the last evaluation) and config.yaml."""
    log = directory / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    (log / "config.yaml").write_text(
        yaml.safe_dump({"model": {"grpo": {"num_generations": n}}, "data": {"init_args": {"batch_size": p}}})
    )
    columns = ["step", f"val/{key}/pass@1", f"val/{key}/length", "val/base/pass@1", "train/draft/length",
               "train/challenge/length", "time/generate_s", "time/update_s"]  # fmt: skip
    rows = [{"step": s, f"val/{key}/pass@1": acc, f"val/{key}/length": length, "val/base/pass@1": 0.25}
            for s, acc, length in evals]  # fmt: skip
    rows[-1].update(final or {})
    columns += list(final or {})
    rows[1:1] = [{"step": s, "train/draft/length": 10, "train/challenge/length": 5 if challenge else "",
                  "time/generate_s": 1.5, "time/update_s": 0.5} for s in range(steps)]  # fmt: skip
    with (log / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def test_read_run_takes_the_last_evaluation_and_counts_every_rollout_token(tmp_path):
    write_run(tmp_path / "a", [(0, 0.25, 30.0), (2, 0.5, 20.0), (3, 0.75, 10.0)], steps=3)
    r = read_run(tmp_path / "a", "agon", 0, "deployed", wall_s=12.0)
    assert (r.pass_at_1, r.length, r.base_pass_at_1, r.steps) == (0.75, 10.0, 0.25, 3)
    assert r.rollout_tokens == 3 * (10 + 5) * 4 * 2  # steps × (draft + challenge length) × N × P
    assert r.train_s == pytest.approx(6.0) and r.wall_s == 12.0
    assert r.curve == [(0, 0.25, 30.0), (2, 0.5, 20.0), (3, 0.75, 10.0)]
    write_run(tmp_path / "g", [(0, 0.25, 30.0), (1, 0.5, 20.0)], steps=1, challenge=False, n=16)
    assert read_run(tmp_path / "g", "grpo", 0, "deployed", 1.0).rollout_tokens == 10 * 16 * 2
    with pytest.raises(ValueError, match="val/moa/pass@1"):
        read_run(tmp_path / "g", "moa_untrained", 0, "moa", 1.0)


def test_a_game_with_other_roles_counts_its_steps_and_train_time_and_leaves_tokens_uncounted(tmp_path):
    write_run(tmp_path / "pv", [(0, 0.25, 30.0), (2, 0.5, 20.0)], steps=2)
    metrics = tmp_path / "pv" / "lightning_logs" / "version_0" / "metrics.csv"
    metrics.write_text(metrics.read_text().replace("train/draft/length", "train/prover/length"))
    r = read_run(tmp_path / "pv", "prover_verifier", 0, "deployed", wall_s=5.0)
    assert r.steps == 2 and r.train_s == pytest.approx(4.0)  # not 0 steps and 0 s
    assert math.isnan(r.rollout_tokens)


def test_the_sweep_table_gives_length_per_role_at_the_last_evaluation(tmp_path):
    roles = {"length/p50": 12.0, "length/p90": 30.0, "cap_hit": 0.25,
             "draft/length/p50": 40.0, "draft/length/p90": 64.0, "draft/cap_hit": 0.5}  # fmt: skip
    runs = plan(["agon", "grpo"], [0], tmp_path, EXPERIMENTS)
    for run in runs:
        stats = (
            roles if run.variant == "agon" else {k: v for k, v in roles.items() if not k.startswith("draft")}
        )
        write_run(run.directory, [(0, 0.25, 30.0), (2, 0.5, 20.0)], steps=2,
                  final={f"val/deployed/{k}": v for k, v in stats.items()})  # fmt: skip
        (run.directory / MARKER).write_text(json.dumps({"argv": [], "wall_s": 1.0}))
    agon, grpo = report(runs, tmp_path)
    assert (agon.length_p50, agon.length_p90, agon.cap_hit) == (12.0, 30.0, 0.25)
    assert (agon.draft_length_p50, agon.draft_length_p90, agon.draft_cap_hit) == (40.0, 64.0, 0.5)
    assert math.isnan(grpo.draft_length_p90)  # one policy: no drafter stage of its own
    table = (tmp_path / "results.md").read_text()
    assert "| agon | 12.0 | 30.0 | 0.250 | 40.0 | 64.0 | 0.500 |" in table
    assert "| grpo | 12.0 | 30.0 | 0.250 | — | — | — |" in table


def fake_runner(calls: list[str], fail: set[str] = frozenset()):
    def run(argv: list[str], log_path: Path) -> int:
        directory = log_path.parent
        calls.append(directory.parent.name + "/" + directory.name)
        if calls[-1] in fail:
            return 1
        seed = int(directory.name.split("_")[1])
        write_run(directory, [(0, 0.25, 30.0), (2, 0.5 + 0.1 * seed, 20.0)], steps=2)
        return 0

    return run


def test_interrupted_sweep_reuses_finished_runs_and_redoes_the_rest(tmp_path, capsys):
    out = tmp_path / "out"
    runs = plan(["agon", "cooperative"], [0, 1], out, EXPERIMENTS)
    calls: list[str] = []
    failed = sweep(runs, BASE, [], out, fake_runner(calls, fail={"cooperative/seed_1"}), jobs=2)
    assert sorted(calls) == ["agon/seed_0", "agon/seed_1", "cooperative/seed_0", "cooperative/seed_1"]
    assert failed == [runs[3]] and not (runs[3].directory / MARKER).exists()  # cooperative/seed_1
    assert "cooperative/seed_1" in (out / "results.md").read_text()  # listed as not finished
    (runs[3].directory / "stale.txt").write_text("from the interrupted attempt")

    calls.clear()
    assert sweep(runs, BASE, [], out, fake_runner(calls)) == []
    assert calls == ["cooperative/seed_1"]
    assert not (runs[3].directory / "stale.txt").exists(), "an unfinished run was not started over"
    assert json.loads((runs[0].directory / MARKER).read_text())["argv"] == runs[0].argv(BASE, [])
    with pytest.raises(SystemExit, match="agon/seed_0 was finished with other arguments"):
        sweep(runs, BASE, ["--trainer.max_steps=1"], out, fake_runner(calls))


def sitting(directory: Path, version: int, rows: list[dict]) -> None:
    """One process's ``metrics.csv`` (and ``config.yaml``) of a run, as ``lightning_logs/version_N``."""
    log = directory / "lightning_logs" / f"version_{version}"
    log.mkdir(parents=True)
    (log / "config.yaml").write_text(
        yaml.safe_dump({"model": {"grpo": {"num_generations": 4}}, "data": {"init_args": {"batch_size": 2}}})
    )
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (log / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def train(step: int, length: int = 10) -> dict:
    """A training row (``step``: the step's index)."""
    return {"step": step, "train/draft/length": length, "train/challenge/length": 5, "time/generate_s": 1.5,
            "time/update_s": 0.5}  # fmt: skip


def evaluation(steps: int, acc: float) -> dict:
    """An evaluation row (``step``: the steps trained)."""
    return {"step": steps, "val/deployed/pass@1": acc, "val/deployed/length": 20.0, "val/base/pass@1": 0.25}


# A run never stopped: 6 steps, evaluated before the first and after steps 3 and 6.
STRAIGHT = [evaluation(0, 0.25), *map(train, range(3)), evaluation(3, 0.5), *map(train, range(3, 6)),
            evaluation(6, 0.75)]  # fmt: skip


def test_a_run_resumed_after_a_kill_is_read_across_its_sittings_as_a_run_never_stopped(tmp_path):
    sitting(tmp_path / "straight", 0, STRAIGHT)
    # Killed during step 6 after logging steps 4 and 5; its last checkpoint: 3 steps done, after that evaluation.
    first = [evaluation(0, 0.25), *map(train, range(3)), evaluation(3, 0.5), train(3, 99), train(4, 99)]
    sitting(tmp_path / "resumed", 0, first)
    sitting(tmp_path / "resumed", 1, [*map(train, range(3, 6)), evaluation(6, 0.75)])
    straight = read_run(tmp_path / "straight", "agon", 0, "deployed", wall_s=1.0)
    resumed = read_run(tmp_path / "resumed", "agon", 0, "deployed", wall_s=1.0)
    assert (
        resumed == straight
    )  # the repeated steps 3-4 (length 99) counted once, from the sitting that went on
    assert (resumed.steps, resumed.curve) == (6, [(0, 0.25, 20.0), (3, 0.5, 20.0), (6, 0.75, 20.0)])
    # Killed right after the checkpoint, before logging anything more: the next sitting picks up at step 3.
    sitting(tmp_path / "at_save", 0, STRAIGHT[:5])
    sitting(tmp_path / "at_save", 1, STRAIGHT[5:])
    assert read_run(tmp_path / "at_save", "agon", 0, "deployed", wall_s=1.0) == straight


def test_an_interrupted_run_goes_on_from_its_last_checkpoint_and_a_changed_one_starts_over(tmp_path, capsys):
    out = tmp_path / "out"
    (run,) = plan(["agon"], [0], out, EXPERIMENTS)
    commands: list[list[str]] = []

    def killed_after_3_steps(argv: list[str], log_path: Path) -> int:
        commands.append(argv)
        assert json.loads((log_path.parent / STARTED).read_text())["argv"] == argv  # what a resume must match
        sitting(log_path.parent, 0, [*STRAIGHT[:5], train(3)])
        (log_path.parent / "checkpoints").mkdir()
        (log_path.parent / "checkpoints" / "last.ckpt").write_text("3 steps done")
        log_path.write_text("first sitting\n")
        return -9

    def goes_on(argv: list[str], log_path: Path) -> int:
        commands.append(argv)
        with log_path.open("a") as log:
            log.write("second sitting\n")
        sitting(log_path.parent, 1, STRAIGHT[5:])
        return 0

    assert sweep([run], BASE, [], out, killed_after_3_steps) == [run]
    capsys.readouterr()
    sweep_main(["--variants", "agon", "--seeds", "0", "--out", str(out), "--base-config", str(BASE),
                "--experiments-dir", str(EXPERIMENTS), "--dry-run"])  # fmt: skip
    assert (
        capsys.readouterr().out.strip().endswith("--ckpt_path last")
    )  # a dry run shows the resume it would run
    assert sweep([run], BASE, [], out, goes_on) == []
    assert commands == [run.argv(BASE, []), [*run.argv(BASE, []), "--ckpt_path", "last"]]
    assert "agon seed 0: going on from" in capsys.readouterr().out
    assert (run.directory / "run.log").read_text() == "first sitting\nsecond sitting\n"
    done = json.loads((run.directory / MARKER).read_text())
    assert (
        done["argv"] == run.argv(BASE, []) and done["wall_s"] is None
    )  # its first sitting was not timed whole
    (result,) = report([run], out)
    assert result.steps == 6 and result.curve[-1] == (6, 0.75, 20.0) and math.isnan(result.wall_s)
    assert "| agon | 1 | 0.750 | 20.0 |" in (out / "results.md").read_text()

    # Unfinished with other arguments: started over in a clean directory, not resumed.
    (other,) = plan(["cooperative"], [0], out, EXPERIMENTS)
    assert sweep([other], BASE, ["--trainer.max_steps=3"], out, killed_after_3_steps) == [other]
    commands.clear()
    assert sweep([other], BASE, [], out, fake_runner([])) == []
    assert not (other.directory / "checkpoints").exists()


def test_a_clean_checkout_resumes_from_the_committed_archives_without_redoing_a_run(tmp_path, capsys):
    out = tmp_path / "out"
    runs = plan(["agon"], [0, 1], out, EXPERIMENTS)
    assert sweep(runs[:1], BASE, [], out, fake_runner([])) == []  # seed 0 finished and archived
    table = (out / "results.md").read_text()
    shutil.rmtree(runs[0].directory)  # a clean checkout: git keeps the archive only
    calls: list[str] = []
    assert sweep(runs, BASE, [], out, fake_runner(calls)) == []
    assert calls == ["agon/seed_1"]  # seed 0 not redone
    assert "agon seed 0: finished earlier, reused" in capsys.readouterr().out
    assert "| agon | 2 |" in (out / "results.md").read_text() and "| agon | 1 |" in table
    shutil.rmtree(runs[1].directory)
    with pytest.raises(SystemExit, match="and its archive"):  # archived with other arguments: refused
        sweep(runs, BASE, ["--trainer.max_steps=1"], out, fake_runner(calls))


def test_report_gives_mean_and_std_over_seeds_and_plots(tmp_path):
    runs = plan(["agon", "moa_untrained"], [0, 1], tmp_path, EXPERIMENTS)
    for run, acc in zip(runs, (0.5, 0.3, 0.7)):
        write_run(run.directory, [(0, 0.25, 30.0), (4, acc, 20.0)][run.eval_only :], steps=4 * (not run.eval_only),
                  key=run.metric_key)  # fmt: skip
        (run.directory / MARKER).write_text(json.dumps({"argv": [], "wall_s": 10.0}))
    results = report(runs, tmp_path)
    assert [(r.variant, r.pass_at_1) for r in results] == [
        ("agon", 0.5),
        ("moa_untrained", 0.3),
        ("agon", 0.7),
    ]
    table = (tmp_path / "results.md").read_text()
    assert "| agon | 2 | 0.600 ± 0.141 | 20.0 ± 0.0 | — | — | 4 ± 0 | 480 ± 0 |" in table
    assert "| moa_untrained | 1 | 0.300 | 20.0 | — | — | 0 | 0 |" in table
    assert len(list(csv.DictReader((tmp_path / "results.csv").open()))) == 3
    for png in ("pass_at_1.png", "length.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def write_outcomes(run_dir: Path, key: str, correct: list[bool], split: str = "") -> None:
    log = run_dir / "lightning_logs" / "version_0"
    rows = [{"question": f"q{i}", "split": split, key: c, f"{key}/length": 10} for i, c in enumerate(correct)]
    (log / "outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_comparisons_come_from_each_runs_outcomes(tmp_path):
    runs = plan(["agon", "grpo"], [0, 1, 2, 3], tmp_path, EXPERIMENTS)
    rng = random.Random(0)
    bases = {seed: [rng.random() < 0.4 for _ in range(120)] for seed in range(4)}
    for run in runs:
        write_run(run.directory, [(0, 0.25, 30.0), (4, 0.5, 20.0)], steps=4)
        (run.directory / MARKER).write_text(json.dumps({"argv": [], "wall_s": 10.0}))
        key = "alpha" if run.variant == "grpo" else "cascade_ab"
        # Agon solves every problem GRPO solves, plus about a quarter more.
        base = bases[run.seed]
        write_outcomes(
            run.directory, key, base if run.variant == "grpo" else [b or rng.random() < 0.4 for b in base]
        )
    results = report(runs, tmp_path)
    assert {len(r.outcomes[""]) for r in results} == {120}
    line = next(
        x for x in (tmp_path / "results.md").read_text().splitlines() if x.startswith("| agon − grpo |")
    )
    mean, low, high = (float(v) for v in re.findall(r"[+-]\d\.\d+", line)[:3])
    assert 0 < low < mean < high and "(4 seeds × 120)" in line
    assert compare(results, "agon", "grpo", "hard") is None  # no hard split in these runs
    # A trained variant with fewer seeds pairs on its own seeds only (only an untrained one stands for every seed).
    one_seed = [r for r in results if not (r.variant == "agon" and r.seed > 0)]
    assert compare(one_seed, "agon", "grpo", "").endswith("(1 seeds × 120)")


def test_moa_is_the_base_twice_and_never_the_deployed_policy():
    for adapters, game, deployed in [
        (("alpha",), "single", "alpha"),
        (("alpha", "beta"), "cascade", "cascade_ab"),
    ]:
        evaluator = CascadeEvaluator(adapters, game, moa=True)
        assert evaluator.cascades[-1] == ("moa", "base", "base")
        assert evaluator.deployed_key == deployed
    assert "moa" not in CascadeEvaluator(("alpha", "beta"), "cascade").keys


# ---------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_agon_sweep_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path):
    out = tmp_path / "sweep"
    overrides = [
        f"--model.model_name_or_path={tiny_model_dir}", "--trainer.limit_train_batches=1",
        # no callback listed: `agon fit` adds the standard set, `agon validate` its report (outcomes.jsonl)
        "--skip_callbacks=[DivergenceMonitor, SampleTable, TraceLengthMonitor]",
        "--trainer.enable_checkpointing=false", "--data.init_args.batch_size=2",
        "--data.init_args.train_size=20", "--data.init_args.val_size=4", "--data.init_args.hard_size=2",
        "--model.grpo.num_generations=2",
        "--model.rollout.init_args.max_new_tokens=6",
    ]  # fmt: skip
    args = ["--variants", "agon", "moa_untrained", "--seeds", "3", "--out", str(out), "--base-config", str(BASE),
            "--experiments-dir", str(EXPERIMENTS), "--", *overrides]  # fmt: skip
    sweep_main(args)
    agon, moa = (out / v / "seed_3" for v in ("agon", "moa_untrained"))
    assert (agon / MARKER).is_file() and (moa / MARKER).is_file()
    result = read_run(agon, "agon", 3, "deployed", 0.0)
    assert [step for step, _, _ in result.curve] == [0, 1] and result.steps == 1
    assert 0 < result.rollout_tokens <= 2 * 6 * 2 * 2  # (drafts + challenges) × max tokens × N × P
    (metrics,) = moa.glob("lightning_logs/version_*/metrics.csv")
    (row,) = [r for r in csv.DictReader(metrics.open()) if r.get("val/moa/pass@1")]
    assert row["val/alpha/pass@1"] == row["val/base/pass@1"]  # zero-B alpha is the base
    (outcomes,) = moa.glob("lightning_logs/version_*/outcomes.jsonl")  # `agon validate` writes them too
    assert [json.loads(line)["deployed"] for line in outcomes.read_text().splitlines()] == ["alpha"] * 6
    assert "moa/converted" in json.loads(outcomes.read_text().splitlines()[0])
    assert "| agon | 1 |" in (out / "results.md").read_text()


class KillOnceAt(L.Callback):
    """SIGKILLs its process as step ``step`` starts, once: the first process to get there leaves ``flag``."""

    def __init__(self, step: int, flag: str) -> None:
        self.step, self.flag = step, Path(flag)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= self.step and not self.flag.exists():
            self.flag.write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_sweep_run_killed_mid_training_goes_on_and_reads_as_the_run_never_stopped(tiny_model_dir, tmp_path):
    """Real ``agon fit`` processes: a run SIGKILLed as its third step starts (after its step-2 checkpoint) is
    resumed by the rerun sweep, and its table row, curve and outcomes are the uninterrupted run's."""
    extra = tmp_path / "extra.yaml"
    extra.write_text(json.dumps({"trainer": {"callbacks": [
        {"class_path": "agon_lightning.callbacks.AgonCheckpoint", "init_args": {"every_n_train_steps": 1}},
        {"class_path": "test_sweep.KillOnceAt", "init_args": {"step": 2, "flag": str(tmp_path / "killed")}},
    ]}}))  # fmt: skip
    overrides = [
        "--config", str(extra), f"--model.model_name_or_path={tiny_model_dir}", "--trainer.limit_train_batches=3",
        "--trainer.val_check_interval=2", "--data.init_args.batch_size=2", "--data.init_args.train_size=20",
        "--data.init_args.val_size=4", "--data.init_args.hard_size=2", "--model.grpo.num_generations=2",
        "--model.rollout.init_args.max_new_tokens=6",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}  # fmt: skip

    def runner(argv: list[str], log_path: Path) -> int:
        with log_path.open("a") as log:
            return subprocess.run([*AGON, *argv], stdout=log, stderr=subprocess.STDOUT, env=env).returncode

    killed = plan(["agon"], [3], tmp_path / "killed_sweep", EXPERIMENTS)
    assert sweep(killed, BASE, overrides, tmp_path / "killed_sweep", runner) == killed  # SIGKILLed
    assert (tmp_path / "killed").exists() and list(killed[0].directory.rglob("last.ckpt"))
    assert sweep(killed, BASE, overrides, tmp_path / "killed_sweep", runner) == []  # goes on
    straight = plan(["agon"], [3], tmp_path / "straight_sweep", EXPERIMENTS)
    assert (
        sweep(straight, BASE, overrides, tmp_path / "straight_sweep", runner) == []
    )  # the flag is left: no kill
    (resumed,), (whole,) = (
        report(killed, tmp_path / "killed_sweep"),
        report(straight, tmp_path / "straight_sweep"),
    )
    assert len(list(killed[0].directory.glob("lightning_logs/version_*"))) == 2
    assert whole.steps == 3 and [s for s, _, _ in whole.curve] == [0, 2, 3]
    for field in ("steps", "curve", "hard_curve", "rollout_tokens", "pass_at_1", "length", "outcomes"):
        assert getattr(resumed, field) == getattr(whole, field), field


def test_each_run_names_the_policy_it_deployed_and_the_plots_dash_cascades(tmp_path, monkeypatch):
    for name, deployed in (("a", "cascade_ab"), ("g", "alpha"), ("s", "cascade_aa")):
        write_run(tmp_path / name, [(0, 0.25, 30.0), (2, 0.5, 20.0)], steps=2)
        log = tmp_path / name / "lightning_logs" / "version_0"
        rows = [
            {"question": "q0", "split": "", "deployed": deployed, deployed: True, f"{deployed}/length": 9}
        ]
        (log / "outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = {
        v: read_run(tmp_path / d, v, 0, "deployed", 1.0)
        for v, d in (("agon", "a"), ("grpo", "g"), ("self_refine", "s"))
    }
    assert {v: r.policy for v, r in runs.items()} == {
        "agon": "cascade_ab",
        "grpo": "alpha",
        "self_refine": "cascade_aa",
    }
    write_run(tmp_path / "m", [(0, 0.3, 20.0)], steps=0, key="moa")
    assert read_run(tmp_path / "m", "moa_untrained", 0, "moa", 1.0).policy == "moa"  # an explicit key as is

    import agon_lightning.experiments.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "draw", lambda panels, *a, **k: drawn.append(panels))
    plot_curves({v: [r] for v, r in runs.items()}, tmp_path)
    dashed = {s.label: s.dashed for s in drawn[0][0].series}
    assert dashed == {"agon": True, "grpo": False, "self_refine": True}


def test_the_hard_split_is_read_and_plotted_at_every_evaluation(tmp_path, monkeypatch):
    write_run(tmp_path / "a", [(0, 0.25, 30.0), (2, 0.5, 20.0), (4, 0.75, 10.0)], steps=4)
    path = tmp_path / "a" / "lightning_logs" / "version_0" / "metrics.csv"
    rows = list(csv.DictReader(path.open()))
    hard = {"0": (0.1, 90.0), "2": (0.2, 80.0), "4": (0.3, 70.0)}
    for r in rows:
        if r["val/deployed/pass@1"]:
            r["val/hard/deployed/pass@1"], r["val/hard/deployed/length"] = hard[r["step"]]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=[*rows[0], "val/hard/deployed/pass@1", "val/hard/deployed/length"]
        )
        writer.writeheader()
        writer.writerows(rows)
    r = read_run(tmp_path / "a", "agon", 0, "deployed", 1.0)
    assert r.hard_curve == [(0, 0.1, 90.0), (2, 0.2, 80.0), (4, 0.3, 70.0)]
    assert (r.hard_pass_at_1, r.hard_length) == (0.3, 70.0)

    import agon_lightning.experiments.plots as plots

    drawn = []
    monkeypatch.setattr(plots, "draw", lambda panels, *a, **k: drawn.append(panels))
    plot_curves({"agon": [r]}, tmp_path)
    (main, hard_panel), (main_length, hard_length) = drawn
    assert [s.steps for s in hard_panel.series] == [[0, 2, 4]] and hard_panel.series[0].values == [
        0.1,
        0.2,
        0.3,
    ]
    assert hard_length.series[0].values == [90.0, 80.0, 70.0] and main.series[0].values == [0.25, 0.5, 0.75]


def test_every_row_of_the_paper_gets_a_colour_of_its_own():
    from agon_lightning.experiments.paper_table import PAPER_VARIANTS
    from agon_lightning.experiments.plots import colours

    rows = list(dict.fromkeys([*PAPER_VARIANTS, "other_summary"]))
    assert len(set(colours(rows).values())) == len(rows)


def test_every_finished_run_is_archived_and_the_tables_come_back_from_the_archive_alone(tmp_path):
    from agon_lightning.experiments.archive import archive_path

    out = tmp_path / "out"
    runs = plan(["agon", "cooperative"], [0, 1], out, EXPERIMENTS)
    assert sweep(runs, BASE, [], out, fake_runner([], fail={"cooperative/seed_1"})) == [runs[3]]
    packed = sorted(p.relative_to(out).as_posix() for p in (out / "archive").rglob("*.tar.gz"))
    assert packed == [
        "archive/agon/seed_0.tar.gz",
        "archive/agon/seed_1.tar.gz",
        "archive/cooperative/seed_0.tar.gz",
    ]
    assert archive_path(out, "agon", 0).stat().st_size < 10_000
    table = (out / "results.md").read_text()
    for run in runs:  # checkpoints, logs, everything git ignores: gone
        shutil.rmtree(run.directory, ignore_errors=True)
    (out / "results.md").unlink()
    args = ["--variants", "agon", "cooperative", "--seeds", "0", "1", "--out", str(out), "--base-config", str(BASE),
            "--experiments-dir", str(EXPERIMENTS), "--from-archive"]  # fmt: skip
    sweep_main(args)
    assert (out / "results.md").read_text() == table
    assert not list(out.glob("*/seed_*/")), "the archive was unpacked into the sweep's directory"


def killed_after_a_checkpoint(argv: list[str], log_path: Path) -> int:
    """A runner killed (-9) once its run has left a ``last.ckpt``."""
    (log_path.parent / "checkpoints").mkdir()
    (log_path.parent / "checkpoints" / "last.ckpt").write_text("3 steps done")
    return -9


def finishes_straight(argv: list[str], log_path: Path) -> int:
    """A runner whose run finishes in one sitting."""
    sitting(log_path.parent, 0, STRAIGHT)
    return 0


def test_a_run_records_its_code_and_a_resume_on_other_code_says_so(tmp_path, capsys, monkeypatch):
    import agon_lightning.experiments.sweep as sweep_module

    out = tmp_path / "out"
    (run,) = plan(["agon"], [0], out, EXPERIMENTS)

    monkeypatch.setattr(sweep_module, "code_version", lambda: "aaaa111")
    assert sweep([run], BASE, [], out, killed_after_a_checkpoint) == [run]
    assert json.loads((run.directory / STARTED).read_text())["code"] == "aaaa111"
    capsys.readouterr()
    monkeypatch.setattr(sweep_module, "code_version", lambda: "bbbb222+changes")
    assert sweep([run], BASE, [], out, finishes_straight) == []
    printed = capsys.readouterr().out
    assert "agon seed 0: WARNING: it started on code aaaa111 and goes on with bbbb222+changes" in printed
    assert json.loads((run.directory / MARKER).read_text())["code"] == "bbbb222+changes"  # its last sitting's


def test_a_run_records_its_environment_and_a_resume_in_another_says_which_parts_differ(
    tmp_path, capsys, monkeypatch
):
    import agon_lightning.experiments.sweep as sweep_module

    out = tmp_path / "out"
    (run,) = plan(["agon"], [0], out, EXPERIMENTS)
    first = {"python": "3.11.7", "torch": "2.13.0", "transformers": "5.24.0", "cpu": "AMD EPYC 7B13"}
    second = {**first, "transformers": "5.25.0", "cpu": "Intel(R) Xeon(R) Processor"}

    monkeypatch.setattr(sweep_module, "environment", lambda: first)
    assert sweep([run], BASE, [], out, killed_after_a_checkpoint) == [run]
    assert json.loads((run.directory / STARTED).read_text())["environment"] == first
    capsys.readouterr()
    monkeypatch.setattr(sweep_module, "environment", lambda: second)
    assert sweep([run], BASE, [], out, finishes_straight) == []
    printed = capsys.readouterr().out
    assert (
        "agon seed 0: WARNING: it goes on in another environment (cpu: AMD EPYC 7B13 -> Intel(R) Xeon(R) "
        "Processor; transformers: 5.24.0 -> 5.25.0)"
    ) in printed
    assert json.loads((run.directory / MARKER).read_text())["environment"] == second  # its last sitting's


def test_a_resume_in_the_same_environment_warns_of_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    (run,) = plan(["agon"], [0], out, EXPERIMENTS)

    assert sweep([run], BASE, [], out, killed_after_a_checkpoint) == [run]
    assert sweep([run], BASE, [], out, finishes_straight) == []
    assert "another environment" not in capsys.readouterr().out


def test_the_environment_names_python_the_installed_libraries_and_the_processor(tmp_path):
    from agon_lightning.infra.provenance import cpu_model, differences, environment

    env = environment()
    assert env["python"].count(".") == 2
    assert env["torch"].startswith(torch.__version__.split("+")[0])
    assert "vllm" not in env or env["vllm"]  # a package that is not installed is left out, not recorded empty
    assert env["cpu"]
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    )
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) Processor"
    assert differences({"a": "1", "b": "2"}, {"a": "1", "c": "3"}) == ["b: 2 -> (none)", "c: (none) -> 3"]


def test_the_gpus_are_named_by_nvidia_smi_and_absent_without_it(tmp_path, monkeypatch):
    from agon_lightning.infra.provenance import gpu_models

    fake = tmp_path / "bin"
    fake.mkdir()
    monkeypatch.setenv("PATH", str(fake))
    assert gpu_models() is None  # no nvidia-smi: no GPU recorded
    (fake / "nvidia-smi").write_text(
        "#!/bin/sh\nprintf 'NVIDIA H200\\nNVIDIA H200\\nNVIDIA H100 80GB HBM3\\n'\n"
    )
    (fake / "nvidia-smi").chmod(0o755)
    assert gpu_models() == "NVIDIA H200 ×2, NVIDIA H100 80GB HBM3 ×1"


def test_the_code_version_is_this_checkouts_commit_and_none_outside_git(tmp_path):
    from agon_lightning.infra.provenance import code_version

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("this checkout is not a git repository")
    assert code_version().split("+")[0] == head.stdout.strip()
    outside = tmp_path / "pkg"
    outside.mkdir()
    (outside / "__init__.py").write_text("")
    assert code_version(outside) is None  # not a git checkout
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert code_version(outside) is None  # inside a repository that does not track it
