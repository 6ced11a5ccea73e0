"""Trace lengths, divergence and sample tables: their numbers checked against direct computations."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import build_char_tokenizer

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks import DivergenceMonitor, SampleTable, TraceLengthMonitor, plot_trace_lengths
from agon_lightning.callbacks.divergence import (
    answer_counts,
    delta_inner,
    delta_stats,
    lora_factors,
    mean_token_kls,
)
from agon_lightning.callbacks.samples import markdown_table, sample_rows
from agon_lightning.callbacks.trace_length import length_stats, summary_part, text_stats
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.records import RoleRollout, StepRecord
from agon_lightning.rollout.hf import RolloutBatch
from agon_lightning.training.module import AgonModule


class RecordingLogger:
    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.tables: list[tuple[str, list[str], list[list], int]] = []

    def log_metrics(self, metrics, step=None):
        self.metrics.append((step, dict(metrics)))

    def log_table(self, key, columns=None, data=None, step=None):
        self.tables.append((key, columns, data, step))


def fake_trainer(tmp_path, **kwargs):
    return SimpleNamespace(is_global_zero=True, log_dir=str(tmp_path), default_root_dir=str(tmp_path),
                           loggers=[RecordingLogger()], should_stop=False, sanity_checking=False, **kwargs)  # fmt: skip


def role(adapter, texts, correct, truncated=None, rewards=None, name="drafter"):
    n = len(texts)
    rb = RolloutBatch(
        prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.long),
        completion_ids=torch.zeros(n, 1, dtype=torch.long), completion_mask=torch.ones(n, 1, dtype=torch.long),
        texts=texts, lengths=torch.tensor([len(t) + 1 for t in texts]),
        truncated=torch.tensor(truncated or [False] * n),
    )  # fmt: skip
    verdicts = [Verdict(correct=c, reason="ok" if c else "wrong_answer", extracted=extract_answer(t))
                for t, c in zip(texts, correct)]  # fmt: skip
    return RoleRollout(adapter, rb, verdicts, torch.tensor(rewards or [float(c) for c in correct]), role=name)


def game(step=0):
    """Two problems × two drafts, with answers chosen to exercise agreement and copying."""
    problems = [Problem("1+1=", "2"), Problem("2+2=", "4")]
    drafts = ["<think>1+1</think>two<answer>2</answer>", "<think>x</think><answer>3</answer>",
              "<think>2+2=5</think>five<answer>5</answer>", "no answer here"]  # fmt: skip
    challenges = ["<answer>2</answer>", "<answer> 3 </answer>", "<answer>4</answer>", "<answer>9</answer>"]
    record = StepRecord(
        step, problems, role("alpha", drafts, [True, False, False, False], [False, False, False, True])
    )
    record.summaries = ["two", "", "five", "no answer here"]
    record.challenge = role(
        "beta", challenges, [True, False, True, False], rewards=[1.0, 0.0, 2.0, 0.0], name="challenger"
    )
    return record


# ---------------------------------------------------------------------------------------------
# Trace lengths
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,summary", [
    ("<think>a b</think>so 2<answer>2</answer>", "so 2"),
    ("<think>cut off inside the trace", ""),
    ("no trace, 2 \\boxed{2}", "no trace, 2"),
])  # fmt: skip
def test_summary_is_after_the_trace_without_the_answer(text, summary):
    assert summary_part(text) == summary


def test_length_stats_by_hand():
    stats = length_stats(torch.tensor([1, 2, 3, 4, 10]), torch.tensor([1, 0, 0, 0, 1]).bool(),
                         torch.tensor([0, 1, 1, 1, 2]), torch.tensor([1, 1, 1, 1, 6]))  # fmt: skip
    assert stats == pytest.approx(
        {
            "tokens_mean": 4.0,
            "tokens_p50": 3.0,
            "tokens_p90": 7.6,
            "tokens_max": 10.0,
            "truncation_rate": 0.4,
            "think_tokens_mean": 1.0,
            "summary_tokens_mean": 2.0,
        }
    )


def test_trace_and_summary_are_counted_in_tokens():
    tok = build_char_tokenizer()  # one token per character, one per tag
    texts = ["<think>abc</think>de<answer>5</answer>", "plain"]
    stats = text_stats(tok, texts, torch.tensor([10, 5]), torch.tensor([False, True]))
    assert stats["think_tokens_mean"] == 1.5 and stats["summary_tokens_mean"] == (2 + 5) / 2


def test_trace_monitor_logs_each_role_and_validation_and_plots(tmp_path):
    trainer = fake_trainer(tmp_path)
    logged = {}
    evaluator = SimpleNamespace(
        last_outputs=[{"base": {"text": "abcdef"}, "alpha": {"text": "<think>ab</think>c"}}]
    )
    module = SimpleNamespace(last_record=game(step=3), tokenizer=build_char_tokenizer(), agon_step=4,
                             rollout=SimpleNamespace(max_new_tokens=6), evaluator=evaluator,
                             log_dict=lambda metrics, **kw: logged.update(metrics))  # fmt: skip
    monitor = TraceLengthMonitor()
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    ((step, metrics),) = trainer.loggers[0].metrics
    assert step == 3
    assert metrics["trace/draft/tokens_mean"] == pytest.approx(
        sum(len(t) + 1 for t in game().draft.rollouts.texts) / 4
    )
    assert (
        metrics["trace/draft/truncation_rate"] == 0.25 and metrics["trace/challenge/think_tokens_mean"] == 0
    )
    monitor.on_validation_epoch_start(trainer, module)
    monitor.on_validation_batch_end(trainer, module, None, None, 0)
    monitor.on_validation_epoch_end(trainer, module)
    assert logged["trace/val/base/tokens_max"] == 6 and logged["trace/val/base/truncation_rate"] == 1.0
    assert (
        logged["trace/val/alpha/think_tokens_mean"] == 2 and logged["trace/val/alpha/truncation_rate"] == 0.0
    )
    rows = [json.loads(line) for line in (tmp_path / "trace_lengths.jsonl").read_text().splitlines()]
    assert [(r["split"], r["role"], r["step"]) for r in rows] == [
        ("train", "draft", 3),
        ("train", "challenge", 3),
        ("val", "base", 4),
        ("val", "alpha", 4),
    ]
    plot_trace_lengths(tmp_path / "trace_lengths.jsonl", tmp_path / "lengths.png")
    assert (tmp_path / "lengths.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# Divergence
# ---------------------------------------------------------------------------------------------
def test_gram_inner_product_equals_the_dense_one():
    g = torch.Generator().manual_seed(0)
    a1, b1, a2, b2 = (
        torch.randn(s, generator=g, dtype=torch.float64) for s in [(3, 7), (5, 3), (2, 7), (5, 2)]
    )
    dense = float(((0.5 * b1 @ a1) * (2.0 * b2 @ a2)).sum())
    assert delta_inner((a1, b1, 0.5), (a2, b2, 2.0)) == pytest.approx(dense, rel=1e-9)


def test_token_kl_matches_torch():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(11, 4, generator=g)
    hidden = {"p": torch.randn(2, 3, 4, generator=g), "q": torch.randn(2, 3, 4, generator=g)}
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    got = mean_token_kls(hidden, weight, mask, [("kl", "p", "q")])["kl"]
    logp, logq = (torch.log_softmax(hidden[k] @ weight.T, -1)[mask.bool()] for k in ("p", "q"))
    expected = F.kl_div(logq, logp, log_target=True, reduction="sum") / 3
    assert got == pytest.approx(float(expected), rel=1e-5)


def test_answer_agreement_and_copies():
    # pairs: (2, 2) agree, both right; (3, 3) agree, both wrong → a copy; (5, 4) differ; (None, 9).
    assert answer_counts(game()) == (2, 1, 4)


@pytest.fixture(scope="module")
def module(tiny_model_dir):
    m = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
    )
    m.configure_model()
    return m


def test_delta_stats_equal_dense_weights(module):
    def dense(name):
        return {m: s * b.detach() @ a.detach() for m, (a, b, s) in lora_factors(module.policy, name).items()}

    with torch.no_grad():  # give alpha a non-zero ΔW
        for p in (p for n, p in module.policy.named_parameters() if ".lora_B.alpha." in n):
            p.add_(0.01)
    a, b = dense("alpha"), dense("beta")
    stats = delta_stats(module.policy, ("alpha", "beta"))
    flat_a, flat_b = (
        torch.cat([w.flatten() for w in a.values()]),
        torch.cat([w.flatten() for w in b.values()]),
    )
    assert stats["alpha_delta_norm"] == pytest.approx(float(flat_a.norm()), rel=1e-5)
    assert stats["delta_distance"] == pytest.approx(float((flat_a - flat_b).norm()), rel=1e-5)
    assert stats["delta_cosine"] == pytest.approx(float(F.cosine_similarity(flat_a, flat_b, dim=0)), abs=1e-5)
    with torch.no_grad():
        for p in (p for n, p in module.policy.named_parameters() if ".lora_B.alpha." in n):
            p.zero_()


def test_monitor_measures_kl_and_flags_a_collapsed_pair(module, tmp_path):
    problems = [Problem("3+4=", "7"), Problem("9-2=", "7")]
    trainer = fake_trainer(tmp_path, datamodule=SimpleNamespace(val_problems=problems))
    module.last_record = game(step=0)
    monitor = DivergenceMonitor(
        every_n_steps=1, num_probes=2, warmup_steps=1, stop_on_collapse=True, patience=1
    )
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    (step, metrics), = trainer.loggers[0].metrics  # fmt: skip
    assert step == 0 and metrics["divergence/kl_alpha_base"] < 1e-9, "alpha (zero B) is the base"
    assert metrics["divergence/kl_beta_base"] > 0 and metrics["divergence/symmetric_kl"] > 0
    assert metrics["divergence/answer_agreement"] == 0.5 and metrics["divergence/copy_rate"] == 0.25
    assert metrics["divergence/collapsed"] == 0.0, "no collapse check during warm-up"

    saved = {n: p.detach().clone() for n, p in module.policy.named_parameters() if ".alpha." in n}
    params = dict(module.policy.named_parameters())
    with torch.no_grad():  # alpha := beta, the two policies are now one
        for name in saved:
            params[name].copy_(params[name.replace(".alpha.", ".beta.")])
    module.last_record = game(step=1)
    with pytest.warns(UserWarning, match="collapsing toward each other at step 1: symmetric KL 0 <"):
        monitor.on_train_batch_end(trainer, module, None, None, 0)
    metrics = trainer.loggers[0].metrics[-1][1]
    assert metrics["divergence/symmetric_kl"] == 0 and metrics["divergence/delta_distance"] == 0
    assert metrics["divergence/delta_cosine"] == pytest.approx(1.0) and metrics["divergence/collapsed"] == 1.0
    assert trainer.should_stop
    with torch.no_grad():
        for name, value in saved.items():
            params[name].copy_(value)


def test_window_counts_survive_a_resume():
    monitor = DivergenceMonitor()
    monitor._counts, monitor._collapsed_in_a_row = [1, 0, 4], 2
    other = DivergenceMonitor()
    other.load_state_dict(monitor.state_dict())
    assert other._counts == [1, 0, 4] and other._collapsed_in_a_row == 2


# ---------------------------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------------------------
def test_sample_rows_take_the_first_draft_of_each_problem():
    rows = sample_rows(game(step=5), num_rows=5, max_chars=12)
    assert [r["problem"] for r in rows] == ["1+1=", "2+2="]
    second = rows[1]
    assert second["draft"] == "<think>2+2=5 …" and second["summary"] == "five"
    assert second["challenge"] == "<answer>4</a …" and second["challenge_reward"] == 2.0
    assert second["draft_verdict"] == "wrong (wrong_answer; answer='5')" and second["step"] == 5


def test_markdown_table_escapes_pipes_and_newlines():
    from agon_lightning.callbacks.samples import COLUMNS

    row = dict.fromkeys(COLUMNS, "x")
    row["draft"] = "a|b\nc"
    assert "a\\|b ⏎ c" in markdown_table([row]).splitlines()[2]


def test_sample_table_writes_jsonl_and_logs_a_table(tmp_path):
    trainer = fake_trainer(tmp_path)
    table = SampleTable(every_n_steps=2, num_rows=1)
    for step in (0, 1, 2):
        table.on_train_batch_end(trainer, SimpleNamespace(last_record=game(step)), None, None, 0)
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2]
    key, columns, data, step = trainer.loggers[0].tables[-1]
    assert key == "samples" and step == 2 and data[0][columns.index("gold")] == "2"


def test_single_adapter_game_logs_what_applies(tiny_model_dir, tmp_path):
    grpo = AgonModule(
        model_name_or_path=str(tiny_model_dir), game="grpo", lora=LoraOptions(r=2, target_modules=["q_proj"])
    )
    grpo.configure_model()
    record = game(step=0)
    record.challenge, record.summaries = None, []
    grpo.last_record = record
    trainer = fake_trainer(tmp_path, datamodule=None)
    DivergenceMonitor(every_n_steps=1, num_probes=2).on_train_batch_end(trainer, grpo, None, None, 0)
    TraceLengthMonitor().on_train_batch_end(trainer, grpo, None, None, 0)
    (_, divergence), (_, trace) = trainer.loggers[0].metrics
    assert set(divergence) == {"divergence/alpha_delta_norm", "divergence/kl_alpha_base"}
    assert {k.split("/")[1] for k in trace} == {"draft"}
    assert sample_rows(record, 1)[0]["challenge"] is None
