"""Shared pieces of the benchmarks: a tiny model on disk, fixed problems, one-process workers, tables.

Every measurement that reports peak memory runs in a fresh Python process (peak RSS is a
per-process high-water mark), with one intra-op thread, so two configurations measured one
after the other on a shared machine differ by what they do, not by who else is running.
Completions are forced to a fixed length (``min_new_tokens == max_new_tokens``), so every
implementation generates and trains on exactly the same number of tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

RESULTS_DIR = Path(__file__).parent / "results"
WORKER_FLAG = "--worker"


@dataclass
class Workload:
    """One training step's work, shared by every implementation that is compared.

    Attributes:
        prompts: P, problems per step.
        generations: N, rollouts per problem.
        max_new_tokens: Completion length (every completion has exactly this many tokens).
        kl_beta: β, weight of the KL to the base (0 = no reference pass).
        lora_r: LoRA rank (alpha = 2r, on all seven linear projections of each block).
        hidden_size: Width of the tiny Qwen3.
        num_layers: Its depth.
        steps: Measured steps, after one warm-up step.
        seed: Seeds the model, the data and the sampling.
        arch: ``tiny`` (the shape above) or a published shape of :data:`agon_lightning.infra.shapes.QWEN3`
            (e.g. ``qwen3-0.6b``: random weights, the tiny tokenizer, whose ids fit the vocabulary).
    """

    prompts: int = 2
    generations: int = 4
    max_new_tokens: int = 32
    kl_beta: float = 0.0
    lora_r: int = 16
    hidden_size: int = 128
    num_layers: int = 4
    steps: int = 4
    seed: int = 0
    arch: str = "tiny"

    @property
    def rollouts(self) -> int:
        return self.prompts * self.generations


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LEARNING_RATE = 1e-4


# ---------------------------------------------------------------------------- model and data
def build_model_dir(root: Path, work: Workload) -> Path:
    """Save a randomly initialised tiny Qwen3 and its tokenizer under ``root`` (once per shape).

    The saved generation config sets ``min_new_tokens`` to ``max_new_tokens``: an untrained
    model samples EOS at random, and equal lengths make the compared work exactly equal.
    """
    from agon_lightning.infra.tiny import build_tokenizer

    shape = f"h{work.hidden_size}-l{work.num_layers}" if work.arch == "tiny" else work.arch
    path = root / f"{shape}-s{work.seed}-t{work.max_new_tokens}"
    if (path / "config.json").is_file():
        return path
    from transformers import GenerationConfig, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(work.seed)
    model = Qwen3ForCausalLM(model_config(work, tokenizer))
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        min_new_tokens=work.max_new_tokens,
    )
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(path)
    return path


def model_config(work: Workload, tokenizer: Any) -> Any:
    """The ``Qwen3Config`` of ``work.arch`` (``tiny``: ``work``'s width and depth) for ``tokenizer``'s ids."""
    from agon_lightning.infra.shapes import qwen3_config
    from agon_lightning.infra.tiny import TinyArchitecture

    if work.arch != "tiny":
        return qwen3_config(
            work.arch, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
        )
    heads = max(work.hidden_size // 32, 2)
    arch = TinyArchitecture(
        hidden_size=work.hidden_size,
        num_layers=work.num_layers,
        num_heads=heads,
        num_kv_heads=heads // 2,
        intermediate_size=4 * work.hidden_size,
        max_position_embeddings=2048,
    )
    return arch.config(tokenizer)


def make_problems(count: int, seed: int = 0) -> list[Any]:
    """``count`` sums of three two-digit numbers, all of the same length (no prompt padding)."""
    import random

    from agon_lightning.game.types import Problem

    rng = random.Random(seed)
    problems = []
    for _ in range(count):
        terms = [rng.randint(10, 99) for _ in range(3)]
        question = f"Compute {terms[0]} + {terms[1]} + {terms[2]}. Put the result in <answer></answer>."
        problems.append(Problem(question=question, answer=str(sum(terms))))
    return problems


def coin(completion: str) -> bool:
    """A fair coin keyed on the completion's text: the benchmarks' reward, the same on every side.

    An untrained model never answers right, so a reward on correctness is 0 for every row: every
    group's advantages are then 0, and our update (which leaves such groups out of the backward,
    :func:`agon_lightning.training.update.trained_logprobs`) would skip work that TRL still does.
    A coin on the text spreads each group's rewards as training does, on both sides alike.
    """
    return zlib.crc32(completion.encode()) % 2 == 0


def coin_verifier() -> Any:
    """A :class:`~agon_lightning.verifiers.base.Verifier` whose verdict is :func:`coin`."""
    from agon_lightning.game.types import Verdict
    from agon_lightning.verifiers.base import Verifier

    class CoinVerifier(Verifier):
        def verify(self, completion: str, problem: Any) -> Verdict:
            return Verdict(correct=coin(completion))

    return CoinVerifier()


# ---------------------------------------------------------------------------- our trainer
SUMMARIZERS = ("strip_trace", "hidden")


def run_ours(model_dir: Path, work: Workload, game: str, summarizer: str = "strip_trace") -> dict[str, Any]:
    """Train ``1 + work.steps`` steps of ``AgonModule`` with Lightning; time each step.

    Args:
        model_dir: A directory written by :func:`build_model_dir`.
        work: The step's work.
        game: ``grpo`` or ``agon``.
        summarizer: What the challenger reads: ``strip_trace`` (the post-reasoning text; for an
            untrained model, the whole draft) or ``hidden`` (nothing).

    Runs as ``agon fit`` does, with freed memory kept for reuse
    (:func:`agon_lightning.infra.allocator.reuse_freed_memory`; ``AGON_MALLOC=default`` turns it off).

    Returns:
        ``step_s`` (seconds per measured step), ``generate_s`` and ``update_s`` (their split),
        ``rollout_tokens`` (completion tokens generated per step) and ``train_start_rss_mb``.
    """
    import lightning as L

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.data.base import ProblemDataModule
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.infra.allocator import reuse_freed_memory
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.summarizers.basic import HiddenSummarizer, StripTraceSummarizer
    from agon_lightning.training.module import AgonModule, GRPOOptions

    if summarizer not in SUMMARIZERS:
        raise ValueError(f"summarizer must be one of {SUMMARIZERS}, got {summarizer!r}")
    reuse_freed_memory()

    class FixedProblems(ProblemDataModule):
        def load_train(self):
            return make_problems(work.prompts * (work.steps + 1), work.seed)

        def load_val(self):
            return []

    L.seed_everything(work.seed, verbose=False)
    module = AgonModule(
        model_name_or_path=str(model_dir),
        game=game,
        lora=LoraOptions(r=work.lora_r, alpha=2 * work.lora_r, target_modules=LORA_TARGETS),
        grpo=GRPOOptions(num_generations=work.generations, kl_beta=work.kl_beta),
        rollout=HFRollout(max_new_tokens=work.max_new_tokens),
        verifier=coin_verifier(),
        summarizer=HiddenSummarizer() if summarizer == "hidden" else StripTraceSummarizer(),
        prompts=Prompts(chat_template=False),
        optimizer=lambda params: torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0),
        max_grad_norm=1.0,
        validate_at_start=False,
    )
    timer = StepTimer()
    trainer = L.Trainer(
        max_steps=work.steps + 1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
        callbacks=[timer.lightning_callback()], num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(module, FixedProblems(batch_size=work.prompts, seed=work.seed))
    return timer.summary()


def ours_worker(config: dict[str, Any]) -> dict[str, Any]:
    """A worker's entry for :func:`run_ours`: ``model_dir``, ``work``, ``game`` and ``summarizer``."""
    return run_ours(Path(config["model_dir"]), workload_from(config), config["game"], config["summarizer"])


class StepTimer:
    """Records when each training step ends, with the step's token counts and time split.

    Wall time is what a user waits; the process's CPU time is also kept, because on a
    machine shared with other jobs it is far less disturbed by them (one thread per worker).
    """

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []
        self.tokens: list[tuple[int, int]] = []
        self.splits: list[tuple[float, float]] = []
        self.generate_cpu: list[float] = []
        self._pending_generate_cpu = 0.0
        self.train_start_rss_mb = 0.0
        self._time_generate()

    def _time_generate(self) -> None:
        """Count the CPU time spent sampling: Transformers' ``generate`` (TRL, and our fallback) and our decode loop."""
        from transformers import GenerationMixin

        from agon_lightning.rollout import decode_loop as decode

        timer = self

        def timed(original: Callable[..., Any]) -> Callable[..., Any]:
            def sample(*args: Any, **kwargs: Any) -> Any:
                start = time.process_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    timer._pending_generate_cpu += time.process_time() - start

            return sample

        GenerationMixin.generate = timed(GenerationMixin.generate)
        decode.decode = timed(decode.decode)

    def step_end(
        self, rollout_tokens: int, prompt_tokens: int = 0, split: tuple[float, float] = (0, 0)
    ) -> None:
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        self.generate_cpu.append(self._pending_generate_cpu)
        self._pending_generate_cpu = 0.0
        self.tokens.append((rollout_tokens, prompt_tokens))
        self.splits.append(split)

    def summary(self) -> dict[str, Any]:
        """Medians over the measured steps (every step but the first, the warm-up)."""
        if len(self.ends) < 2:
            raise RuntimeError(f"need a warm-up step and at least one measured step, got {len(self.ends)}")
        steps = [b - a for a, b in zip(self.ends, self.ends[1:])]
        cpu_steps = [b - a for a, b in zip(self.cpu_ends, self.cpu_ends[1:])]
        return {
            "step_s": statistics.median(steps),
            "step_s_all": steps,
            "cpu_step_s": statistics.median(cpu_steps),
            "generate_cpu_s": statistics.median(self.generate_cpu[1:]),
            "generate_s": statistics.median(s[0] for s in self.splits[1:]),
            "update_s": statistics.median(s[1] for s in self.splits[1:]),
            "rollout_tokens": statistics.median(t[0] for t in self.tokens[1:]),
            "prompt_tokens": statistics.median(t[1] for t in self.tokens[1:]),
            "train_start_rss_mb": self.train_start_rss_mb,
        }

    def lightning_callback(self) -> Any:
        import lightning as L

        timer = self

        class _Timer(L.Callback):
            def on_train_start(self, trainer, pl_module):
                timer.train_start_rss_mb = current_rss_mb()

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                record = pl_module.last_record
                roles = [record.draft] + ([record.challenge] if record.challenge is not None else [])
                rollout_tokens = sum(int(r.rollouts.lengths.sum()) for r in roles)
                prompt_tokens = sum(int(r.rollouts.prompt_mask.sum()) for r in roles)
                metrics = trainer.callback_metrics
                split = (float(metrics["time/generate_s"]), float(metrics["time/update_s"]))
                timer.step_end(rollout_tokens, prompt_tokens, split)

        return _Timer()


# ---------------------------------------------------------------------------- processes
def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """This process's resident set size now."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def single_thread() -> None:
    """One intra-op and one inter-op thread: a fair share of a busy machine, and stable timings."""
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)


def worker_main(run: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """If this process was started as a worker, run ``run(config)``, print its JSON and return True."""
    if WORKER_FLAG not in sys.argv:
        return False
    config = json.loads(sys.argv[sys.argv.index(WORKER_FLAG) + 1])
    single_thread()
    result = run(config)
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result), flush=True)
    return True


def spawn(module: str, config: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m module`` as a fresh worker process on ``config``; return the result it printed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    proc = subprocess.run(
        [sys.executable, "-m", module, WORKER_FLAG, json.dumps(config)],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=Path(__file__).parents[1],
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"worker {module} failed on {config} (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def workload_parser(
    doc: str, rounds: int, rounds_help: str, steps: int = 4, prompts: int = 2, max_new_tokens: int = 32
) -> argparse.ArgumentParser:
    """A benchmark's parser with the workload's options (``--rounds``, ``--steps``, P, N, T); add its own."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--steps", type=int, default=steps, help="measured steps per run (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=prompts, help="P, problems per step")
    parser.add_argument("--generations", type=int, default=4, help="N, rollouts per problem")
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help="T, tokens per completion")
    parser.add_argument("--arch", default="tiny", help="tiny, or a published shape such as qwen3-0.6b")
    add_results_dir(parser)
    return parser


def add_results_dir(parser: argparse.ArgumentParser) -> None:
    """The ``--results-dir`` option: where :func:`write_json` puts ``NAME.json`` (default ``benchmarks/results``)."""
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="folder for NAME.json (default: benchmarks/results)",
    )


def workload_of(cli: argparse.Namespace, **extra: Any) -> Workload:
    """The :class:`Workload` a :func:`workload_parser` command line asks for (``extra``: other fields)."""
    return Workload(
        prompts=cli.prompts,
        generations=cli.generations,
        max_new_tokens=cli.max_new_tokens,
        steps=cli.steps,
        arch=cli.arch,
        **extra,
    )


def workload_from(config: dict[str, Any]) -> Workload:
    return Workload(**config["work"])


def work_config(work: Workload, **extra: Any) -> dict[str, Any]:
    return {"work": asdict(work), **extra}


# ---------------------------------------------------------------------------- reporting
def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return escaped(str(value))

    def escaped(text: str) -> str:  # a "|" inside a cell would end it
        return text.replace("\\|", "|").replace("|", "\\|")

    lines = [
        f"### {title}",
        "",
        "| " + " | ".join(escaped(c) for c in columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    text = "\n".join(lines)
    print(text + "\n", flush=True)
    return text


def write_json(name: str, data: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write ``data`` (plus the machine and library versions) to ``directory/NAME.json``.

    ``directory`` is ``benchmarks/results`` unless a command line's ``--results-dir`` says otherwise.
    The environment is a sweep run's (:func:`~agon_lightning.infra.provenance.environment`: the
    versions, the CPU's model, the GPUs'), with the core count: timings from two processors do not compare.
    """
    from agon_lightning.infra.provenance import environment

    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "environment": {**environment(), "cpu_count": os.cpu_count(), "torch_threads_per_worker": 1},
        **data,
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")
    return path
