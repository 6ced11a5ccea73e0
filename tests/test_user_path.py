"""The GPU user's path, walked on CPU: a TRL user's data, reward functions and model through the real config.

What runs is ``configs/deepmath_qwen3_0.6b.yaml`` — the config a user with one GPU starts from —
with only what a CPU cannot do differently overridden: the model (a Qwen3-architecture model with
a chat template, saved to a folder as a Hub download lays it out), the device, the dtype, the
lengths and the rollout backend; and what is the user's: the data (a conversational dataset in
TRL's format, written by ``datasets``, with a ``solution`` column and one more) and the rewards
(two TRL reward functions with weights, in a module of the user's own). Two steps through the
installed ``agon`` entry point, then the run resumed with ``--ckpt_path last``, then its bundle
served and asked through the ``openai`` client. This test is what says the path a GPU user takes
is the code the suite tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agon_lightning.cli import main
from agon_lightning.infra.model_source import resolve_model_path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"

# The user's reward functions, in a module of their own (as they would import them into TRL).
# Each records what it was called with, so the test can say what TRL's signature received.
REWARDS = textwrap.dedent(
    """
    import json, os

    def _record(name, prompts, completions, kwargs):
        with open(os.environ["USER_REWARD_LOG"], "a") as f:
            f.write(json.dumps({"fn": name, "prompts": prompts, "completions": completions,
                                "columns": {k: v for k, v in kwargs.items()}}, default=str) + "\\n")

    def accuracy(prompts, completions, solution, **kwargs):
        _record("accuracy", prompts, completions, {"solution": solution, **kwargs})
        return [1.0 if s in c[0]["content"] else 0.0 for c, s in zip(completions, solution)]

    def brevity(completions, source, **kwargs):
        _record("brevity", None, completions, {"source": source, **kwargs})
        # None where it does not apply, as TRL lets a function say
        return [None if src == "other" else -len(c[0]["content"]) / 100 for c, src in zip(completions, source)]
    """
)


def write_dataset(path: Path) -> list[dict]:
    """A conversational TRL dataset (``prompt`` as chat messages, ``solution``, ``source``), by ``datasets``."""
    datasets = pytest.importorskip("datasets")
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} + {b}?"}],
            "solution": str(a + b),
            "source": "other" if a % 3 == 0 else "mine",
        }
        for a in range(1, 13)
        for b in (2, 5)
    ]
    datasets.Dataset.from_list(rows).to_json(str(path))
    return rows


# The rollout backend and its lengths: transformers in the main suite; the config's own vLLM engine in
# the vLLM stage (CPU: eager, a small KV cache, the tiny model's context).
BACKENDS = {
    "hf": ["--model.rollout=HFRollout", "--model.rollout.init_args.max_new_tokens=8"],
    "vllm": [
        "--model.rollout=vllm", "--model.rollout.init_args.max_new_tokens=8",
        "--model.rollout.init_args.max_model_len=512", "--model.rollout.init_args.kv_cache_memory_gib=0.25",
        "--model.rollout.init_args.enforce_eager=true",
    ],
}  # fmt: skip


def fit_args(model_dir: Path, data: Path, root: Path, steps: int, backend: str = "hf") -> list[str]:
    return [
        "fit", "--config", str(CONFIG),
        # the model, the device, the dtype, the lengths, the rollout backend
        f"--model.model_name_or_path={model_dir}", "--trainer.accelerator=cpu", "--model.dtype=float32",
        *BACKENDS[backend],
        # the user's data
        "--data=files", f"--data.init_args.train_source={data}", "--data.init_args.val_size=4",
        "--data.init_args.val_batch_size=4",
        # the user's rewards: TRL's reward_funcs and reward_weights, the graded reward
        "--model.verifier=reward_function",
        "--model.verifier.init_args.reward_funcs=[user_rewards.accuracy, user_rewards.brevity]",
        "--model.verifier.init_args.reward_weights=[1.0, 0.5]",
        "--model.reward=graded",
        # the run: two steps (then one more on resume), written under the test's directory
        f"--trainer.max_steps={steps}", f"--trainer.default_root_dir={root}", "--threads=1",
    ]  # fmt: skip


@pytest.fixture
def user_setup(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    monkeypatch.delitem(sys.modules, "user_rewards", raising=False)  # each test imports its own
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")  # the served bundle imports them too
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("USER_REWARD_LOG", str(log))
    rows = write_dataset(tmp_path / "train.jsonl")
    return tmp_path, rows, log


def agon_fit(args: list[str], backend: str) -> None:
    """``agon ARGS``: in this process with transformers; with vLLM as the installed command, a process per
    run (a second in-process engine after the first breaks vLLM's process-group map)."""
    if backend == "hf":
        main(args)
        return
    agon = shutil.which("agon", path=str(Path(sys.executable).parent)) or shutil.which("agon")
    done = subprocess.run([agon, *args], capture_output=True, text=True, timeout=900, cwd=args_dir(args))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def args_dir(args: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith("--trainer.default_root_dir="))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def test_a_trl_users_data_rewards_and_model_train_resume_and_serve(user_setup, tiny_model_dir, backend):
    tmp_path, rows, log = user_setup
    if backend == "vllm":  # vLLM's CPU attention has no kernel for the test model's head_dim of 8
        tiny_model_dir = shutil.copytree(resolve_model_path("agon:tiny-qwen3"), tmp_path / "tiny-qwen3")
    root = tmp_path / "run"
    root.mkdir()
    agon_fit(fit_args(tiny_model_dir, tmp_path / "train.jsonl", root, steps=2, backend=backend), backend)

    # What the reward functions received: TRL's signature, every column under its own name.
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert {c["fn"] for c in calls} == {"accuracy", "brevity"}
    solutions = {r["solution"] for r in rows}
    for call in calls:
        assert all(
            isinstance(c, list)
            and len(c) == 1
            and c[0]["role"] == "assistant"
            and isinstance(c[0]["content"], str)
            for c in call["completions"]
        ), call["completions"][:2]
        assert {"solution", "source"} <= set(call["columns"]), sorted(call["columns"])
        assert set(call["columns"]["solution"]) <= solutions and None not in call["columns"]["solution"]
        assert set(call["columns"]["source"]) <= {"other", "mine"}
        if call["prompts"] is not None:
            assert all(isinstance(p, list) and p[-1]["role"] == "user" for p in call["prompts"])

    # The run's bundle, ready to serve, and its metrics: each function logged by name.
    bundles = list(root.rglob("checkpoints/last/agon.json"))
    assert len(bundles) == 1, sorted(str(p) for p in root.rglob("*"))[:50]
    bundle = bundles[0].parent
    assert json.loads(bundles[0].read_text())["step"] == 2
    metrics = next(root.rglob("metrics.csv")).read_text().splitlines()[0].split(",")
    assert {"reward/accuracy/mean", "reward/brevity/mean", "reward/accuracy/std"} <= set(metrics), metrics

    # --ckpt_path last resumes the run where it stopped: one more step, not three.
    agon_fit(
        [
            *fit_args(tiny_model_dir, tmp_path / "train.jsonl", root, steps=3, backend=backend),
            "--ckpt_path=last",
        ],
        backend,
    )
    assert json.loads((bundle / "agon.json").read_text())["step"] == 3

    # agon serve on the bundle answers the openai client.
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    openai = pytest.importorskip("openai", reason="needs the openai client: pip install -e '.[dev]'")
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_serve import launch

    url, proc, lines = launch(bundle)
    try:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model=client.models.list().data[0].id,
            messages=[{"role": "user", "content": "What is 2 + 2?"}],
            max_tokens=8,
        )
        assert isinstance(reply.choices[0].message.content, str)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_reward_function_needing_a_column_the_data_lacks_stops_the_fit_at_start(user_setup, tiny_model_dir):
    tmp_path, _, log = user_setup
    (tmp_path / "user_rewards.py").write_text(
        REWARDS
        + "\ndef needs_answer_key(completions, answer_key, **kw):\n    return [0.0] * len(completions)\n"
    )
    args = fit_args(tiny_model_dir, tmp_path / "train.jsonl", tmp_path / "run", steps=2)
    args[
        args.index("--model.verifier.init_args.reward_funcs=[user_rewards.accuracy, user_rewards.brevity]")
    ] = "--model.verifier.init_args.reward_funcs=[user_rewards.accuracy, user_rewards.needs_answer_key]"
    with pytest.raises(
        ValueError, match=r"needs_answer_key needs the column 'answer_key'.*columns: \[.*'solution'"
    ):
        main(args)
    assert not log.exists()  # nothing was generated or graded: the run stopped before its first step
