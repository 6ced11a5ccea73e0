"""The benchmarks' building blocks, and the hot-path changes they measure, on tiny inputs."""

import sys
from pathlib import Path

import pytest
import torch

from agon_lightning.training.grpo import token_logprobs

# benchmarks/ lives in the checkout, not in the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_logprobs import naive_logprobs  # noqa: E402
from benchmarks.bench_memory import adapter_share, qwen3_0_6b_config  # noqa: E402
from benchmarks.common import Workload, build_model_dir, run_ours  # noqa: E402


def test_qwen3_0_6b_adapter_share_matches_the_hand_count():
    share = adapter_share(qwen3_0_6b_config(), rank=16)
    # Per layer: r·(in+out) for q 1024→2048, k and v 1024→1024, o 2048→1024, gate/up 1024→3072, down 3072→1024.
    per_layer = 16 * (3072 + 2048 + 2048 + 3072 + 4096 + 4096 + 4096)
    assert share["adapter_params"] == 28 * per_layer == 10_092_544
    # Tied embedding once; per layer q,k,v,o, the MLP and four norms (hidden ×2, q_norm, k_norm); final norm.
    layer = 1024 * (2048 + 1024 + 1024) + 2048 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128
    assert share["base_params"] == 151_936 * 1024 + 28 * layer + 1024 == 596_049_920
    assert 0.016 < share["adapter_share"] < 0.017


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logprobs_match_the_naive_reference_with_weight_gradients(dtype):
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 16, dtype=dtype, requires_grad=True)
    weight = torch.randn(50, 16, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, 50, (3, 7))
    upstream = torch.randn(3, 7)  # uneven per-token weights, as advantages give
    logp, entropy = token_logprobs(hidden, weight, targets, temperature=0.7, chunk_size=5)
    grads = torch.autograd.grad((logp * upstream).sum(), (hidden, weight))
    ref_logp, ref_entropy = naive_logprobs(hidden.float() / 0.7, weight.float(), targets)
    ref_grads = torch.autograd.grad((ref_logp * upstream).sum(), (hidden, weight))
    assert logp.dtype == torch.float32 and not entropy.requires_grad
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert torch.allclose(logp, ref_logp, atol=tol) and torch.allclose(entropy, ref_entropy, atol=tol)
    for got, want in zip(grads, ref_grads):
        assert got.dtype == dtype
        assert torch.allclose(got.float(), want.float(), atol=tol * want.abs().max().item())


def test_chunked_logprobs_without_autograd_and_on_empty_input():
    hidden, weight = torch.randn(2, 3, 4), torch.randn(9, 4)
    with torch.no_grad():
        logp, _ = token_logprobs(hidden, weight, torch.zeros(2, 3, dtype=torch.long), chunk_size=2)
    assert logp.shape == (2, 3) and (logp < 0).all()
    empty, _ = token_logprobs(torch.randn(2, 0, 4), weight, torch.zeros(2, 0, dtype=torch.long))
    assert empty.shape == (2, 0)


def test_two_grpo_steps_generate_the_forced_length(tmp_path):
    work = Workload(prompts=1, generations=2, max_new_tokens=4, hidden_size=32, num_layers=1, steps=1)
    result = run_ours(build_model_dir(tmp_path, work), work, game="grpo")
    assert result["rollout_tokens"] == work.rollouts * work.max_new_tokens
    assert result["step_s"] > 0 and result["prompt_tokens"] > 0


def test_mixed_adapter_sampling_matches_one_call_per_adapter(tmp_path):
    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule

    work = Workload(max_new_tokens=6, hidden_size=32, num_layers=1)
    module = AgonModule(
        model_name_or_path=str(build_model_dir(tmp_path, work)), rollout=HFRollout(max_new_tokens=6),
        lora=LoraOptions(r=2, beta_init_std=0.5), prompts=Prompts(chat_template=False),
    )  # fmt: skip
    module.configure_model()
    prompts = ["Compute 1 + 2.", "Compute 30 + 4."]
    separate = [module.sample(a, prompts, 1, greedy=True) for a in (None, "alpha", "beta")]
    mixed = module.sample_mixed(
        [a for a in (None, "alpha", "beta") for _ in prompts], prompts * 3, greedy=True
    )
    assert mixed.texts == [t for rb in separate for t in rb.texts]
    assert separate[0].texts != separate[2].texts, "beta's noisy B should change what it writes"


def test_every_lever_switches_off_and_back_on():
    from agon_lightning.adapters import fast_lora
    from agon_lightning.adapters import policy as policy_module
    from agon_lightning.rollout import decode_loop as decode
    from agon_lightning.rollout.hf import HFRollout
    from benchmarks.bench_levers import build, levers, step_parts
    from benchmarks.common import make_problems

    work = Workload(prompts=1, generations=2, max_new_tokens=3, kl_beta=0.04, hidden_size=32, num_layers=1)
    module = build(work, "grpo")
    before = (
        HFRollout.__dict__["_shared_prefill"],
        policy_module.shared_prefixes,
        policy_module.adapters_disabled,
        decode.draw,
    )
    for setting, _ in levers(module).values():
        with setting(False):
            play, update = step_parts(module, make_problems(1), 2)
        assert play > 0 and update > 0
    after = (
        HFRollout.__dict__["_shared_prefill"],
        policy_module.shared_prefixes,
        policy_module.adapters_disabled,
        decode.draw,
    )
    assert after == before and module.rollout.merge_adapter and module.rollout.fused_decode
    assert all("forward" in vars(m) for m in fast_lora.lora_layers(module.policy))


def test_the_plan_counts_the_qwen3_0_6b_base_as_the_hand_count():
    from agon_lightning.infra.plan import Shape

    assert Shape.of(qwen3_0_6b_config()).base_params() == 596_049_920


def test_adapter_sync_counts_what_each_way_writes():
    from transformers import Qwen3Config

    from benchmarks.bench_adapter_sync import sync_costs

    config = Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
    )  # fmt: skip
    r = sync_costs(config, rank=4, dtype=torch.bfloat16, rounds=1)
    # q 32→32, k and v 32→16, o 32→32, gate/up 32→64, down 64→32: r·(in+out) each, fp32 (PEFT keeps adapters in fp32)
    lora = 4 * (64 + 48 + 48 + 64 + 96 + 96 + 96)
    adapters, merged = r["adapters only"]["bytes"], r["merged full weights"]["bytes"]
    assert (
        2 * lora * 4 < adapters < 2 * lora * 4 + 2 * 16_000
    )  # + each folder's headers and adapter_config.json
    assert 2 * r["base_params"] * 2 <= merged < 2 * r["base_params"] * 2 + 2 * 16_000  # two bf16 models
    assert r["byte_ratio"] == merged / adapters
