"""What validation measures beyond pass@1: error overlap, conversions and regressions, the cascade's cost,
the single-adapter cascades and the deployed key fixed before training."""

from __future__ import annotations

import pytest
import torch
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.validation import CascadeEvaluator, ratio_metrics


class PerAdapterRollout(ScriptedRollout):
    """Scripted completions that differ by adapter, so alpha and beta make different mistakes."""

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        names = adapter_names or ["?"] * len(prompts)
        out = super().generate(model, tokenizer, [f"{n}{p}" for n, p in zip(names, prompts)], num_samples)
        plain = super().generate(model, tokenizer, prompts, num_samples)  # the prompts as given
        out.prompt_ids, out.prompt_mask = plain.prompt_ids, plain.prompt_mask
        return out


def evaluate(model_dir, **kwargs):
    dm = ReasoningGymDataModule(train_size=30, val_size=24, val_batch_size=10)
    module = AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=PerAdapterRollout(), verifier=ZeroIsRight(), **kwargs,
    )  # fmt: skip
    module.configure_model()
    return module.evaluator.run(module, dm.val_dataloader()), module.evaluator.last_outcomes


def test_conversions_regressions_overlap_and_cost_agree_with_each_problem(tiny_model_dir):
    metrics, rows = evaluate(tiny_model_dir)
    n = len(rows)
    alpha_wrong = {i for i, r in enumerate(rows) if not r["alpha"]}
    beta_wrong = {i for i, r in enumerate(rows) if not r["beta"]}
    assert alpha_wrong and beta_wrong and alpha_wrong != beta_wrong, (
        "a fixture that cannot tell overlaps apart"
    )
    both = alpha_wrong & beta_wrong
    assert metrics["val/overlap/jaccard"] == pytest.approx(len(both) / len(alpha_wrong | beta_wrong))
    assert metrics["val/overlap/beta_wrong_given_alpha_wrong"] == pytest.approx(len(both) / len(alpha_wrong))
    for key, drafter in (("cascade_ab", "alpha"), ("cascade_ba", "beta")):
        converted = [r[f"{key}/converted"] for r in rows]
        regressed = [r[f"{key}/regressed"] for r in rows]
        assert converted == [not r[drafter] and r[key] for r in rows]
        assert regressed == [r[drafter] and not r[key] for r in rows]
        prefix = f"val/{key}/"
        assert metrics[prefix + "conversions"] == pytest.approx(sum(converted) / n)
        assert metrics[prefix + "pass@1"] == pytest.approx(
            metrics[f"val/{drafter}/pass@1"]
            + metrics[prefix + "conversions"]
            - metrics[prefix + "regressions"]
        )
        wrong = sum(not r[drafter] for r in rows)
        assert metrics[prefix + "conversion_rate"] == pytest.approx(sum(converted) / wrong)
        assert metrics[prefix + "regression_rate"] == pytest.approx(sum(regressed) / (n - wrong))
        # The whole cascade's tokens: the draft's and the challenger's, each problem's own.
        for r in rows:
            assert r[f"{key}/draft_tokens"] == r[f"{drafter}/length"]
            assert r[f"{key}/challenger_tokens"] == r[f"{key}/length"]
            assert (
                r[f"{key}/challenger_prompt_tokens"] > 0 and r[f"{key}/wall_s"] > r[f"{drafter}/wall_s"] > 0
            )
        total = sum(r[f"{key}/draft_tokens"] + r[f"{key}/challenger_tokens"] for r in rows) / n
        assert metrics[prefix + "cost/total_tokens"] == pytest.approx(total)
        assert metrics[prefix + "cost/wall_s"] == pytest.approx(sum(r[f"{key}/wall_s"] for r in rows) / n)
    assert metrics["val/alpha/cost/total_tokens"] == metrics["val/alpha/length"]
    deployed = {k.removeprefix("val/deployed/") for k in metrics if k.startswith("val/deployed/")}
    assert deployed == {k.removeprefix("val/cascade_ab/") for k in metrics if k.startswith("val/cascade_ab/")}
    assert all(metrics[f"val/deployed/{k}"] == metrics[f"val/cascade_ab/{k}"] for k in deployed)


def test_a_grpo_run_evaluates_its_self_cascade_but_deploys_the_adapter(tiny_model_dir):
    metrics, rows = evaluate(tiny_model_dir, game="grpo", evaluate_self_cascade=True)
    assert metrics["val/deployed/pass@1"] == metrics["val/alpha/pass@1"]
    assert "val/cascade_aa/pass@1" in metrics and "cascade_aa/converted" in rows[0]
    assert not any(k.startswith("val/overlap/") for k in metrics)  # one adapter: no overlap
    metrics, _ = evaluate(tiny_model_dir, game="grpo", evaluate_self_cascade=True, deployed="cascade_aa")
    assert metrics["val/deployed/pass@1"] == metrics["val/cascade_aa/pass@1"]


# fmt: off
@pytest.mark.parametrize(
    "adapters,deploy,kwargs,keys,deployed",
    [
        (("alpha", "beta"), "cascade", {}, ["base", "alpha", "beta", "cascade_ab", "cascade_ba"], "cascade_ab"),
        (("alpha",), "cascade", {}, ["base", "alpha", "cascade_aa"], "cascade_aa"),  # self-play, self-refinement
        (("alpha",), "single", {}, ["base", "alpha"], "alpha"),
        (("alpha",), "single", {"self_cascade": True}, ["base", "alpha", "cascade_aa"], "alpha"),
        (("alpha", "beta"), "cascade", {"deployed": "cascade_ba"}, None, "cascade_ba"),
    ],
)
# fmt: on
def test_evaluator_keys_and_the_deployed_key(adapters, deploy, kwargs, keys, deployed):
    evaluator = CascadeEvaluator(adapters, deploy, **kwargs)
    if keys is not None:
        assert evaluator.keys == keys
    assert evaluator.deployed_key == deployed


@pytest.mark.parametrize(
    "adapters, deploy, kwargs, pair",
    [
        (("alpha", "beta"), "cascade", {}, ("alpha", "beta")),
        (("alpha", "beta"), "cascade", {"deployed": "cascade_ba"}, ("beta", "alpha")),
        (("alpha", "beta"), "cascade", {"deployed": "beta"}, ("beta", "alpha")),
        (("alpha",), "single", {}, ("alpha", "alpha")),
        (("alpha",), "single", {"self_cascade": True, "deployed": "cascade_aa"}, ("alpha", "alpha")),
    ],
)
def test_the_deployed_policy_names_who_drafts_and_who_answers(adapters, deploy, kwargs, pair):
    # What `agon predict` through Lightning (AgonModule.predict_step) runs: the deployed cascade.
    evaluator = CascadeEvaluator(adapters, deploy, **kwargs)
    assert (evaluator.deployed_drafter, evaluator.deployed_answerer) == pair


def test_a_deployed_key_the_run_cannot_deploy_is_named():
    with pytest.raises(
        ValueError, match=r"deployed='cascade_ba' .* expected one of \['alpha', 'cascade_aa'\]"
    ):
        CascadeEvaluator(("alpha",), "single", self_cascade=True, deployed="cascade_ba")


def test_ratios_of_means_are_ratios_of_counts_and_undefined_ones_are_left_out():
    means = {"conversions": 0.1, "regressions": 0.05, "_draft_wrong": 0.4}
    ratios = ratio_metrics(means)
    assert ratios == pytest.approx({"conversion_rate": 0.25, "regression_rate": 0.05 / 0.6})
    assert ratio_metrics({"conversions": 0.0, "regressions": 0.0, "_draft_wrong": 1.0}) == {
        "conversion_rate": 0.0
    }
    assert ratio_metrics({"_both_wrong": 0.0, "_either_wrong": 0.0, "_alpha_wrong": 0.0}) == {}
    assert ratio_metrics({"_both_wrong": 0.2, "_either_wrong": 0.5}) == pytest.approx({"jaccard": 0.4})


def test_length_quantiles_and_cap_hits_per_role_agree_with_each_problem(tiny_model_dir):
    # Item 7 of the Countdown testbed: length is a measurement, per role (the drafter's stage and
    # the answering stage), as p50/p90 and the share of completions stopped by max_new_tokens.
    metrics, rows = evaluate(tiny_model_dir)
    for key, drafter in (("alpha", None), ("cascade_ab", "alpha"), ("cascade_ba", "beta")):
        roles = [("length", "length", "capped")]
        if drafter is not None:
            roles.append(("draft/length", "draft_tokens", "draft_capped"))
        for name, length, capped in roles:
            values = torch.tensor([float(r[f"{key}/{length}"]) for r in rows])
            caps = [r[f"{key}/{capped}"] for r in rows]
            assert 0 < sum(caps) < len(caps), "a fixture without both capped and stopped completions"
            assert metrics[f"val/{key}/{name}/p50"] == pytest.approx(float(values.quantile(0.5)))
            assert metrics[f"val/{key}/{name}/p90"] == pytest.approx(float(values.quantile(0.9)))
            cap_stat = "cap_hit" if name == "length" else "draft/cap_hit"
            assert metrics[f"val/{key}/{cap_stat}"] == pytest.approx(sum(caps) / len(caps))
        if drafter is not None:  # the draft stage is the drafter's own completion
            assert [r[f"{key}/draft_capped"] for r in rows] == [r[f"{drafter}/capped"] for r in rows]
    assert metrics["val/deployed/draft/length/p90"] == metrics["val/cascade_ab/draft/length/p90"]


def test_quantiles_of_no_values_are_left_out():
    from agon_lightning.training.validation import quantile_metrics

    assert quantile_metrics("length", []) == {}
    assert quantile_metrics("length", torch.tensor([1.0, 2.0, 3.0, 10.0])) == {
        "length/p50": pytest.approx(2.5), "length/p90": pytest.approx(7.9),
    }  # fmt: skip


def test_the_frozen_base_is_generated_at_the_first_evaluation_only(tiny_model_dir):
    # The base (adapters off) and the untrained cascade cannot change in a run: a later evaluation
    # reuses their outputs, and reports the same figures for them; the adapters are generated again.
    class Counting(PerAdapterRollout):
        calls: list[str] = []

        def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
            self.calls += [str(n) for n in (adapter_names or ["?"])]
            return super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)

    dm = ReasoningGymDataModule(train_size=30, val_size=24, val_batch_size=10)
    rollout = Counting()
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=rollout, verifier=ZeroIsRight(), evaluate_moa=True,
    )  # fmt: skip
    module.configure_model()
    first = module.evaluator.run(module, dm.val_dataloader())
    base_calls = rollout.calls.count("None")
    assert base_calls == 2 * 24  # the base's drafts and the untrained cascade's answers
    rollout.calls.clear()
    second = module.evaluator.run(module, dm.val_dataloader())
    assert rollout.calls.count("None") == 0 and rollout.calls.count("alpha") > 0
    for key in ("val/base/pass@1", "val/base/length", "val/moa/pass@1", "val/moa/length"):
        assert second[key] == first[key]
