"""No dependency's warning or progress bar reaches the user of a command or of the Python entry points.

What each entry point prints is read as the user gets it: ``agon fit``, ``agon predict`` and
``agon serve`` as subprocesses (stdout and stderr, which is then a pipe: the case of a log file),
``Cascade.from_pretrained`` and ``from_config`` in this process, with their warnings recorded
under a fresh interpreter's rules and transformers' progress bars switched back on first. Before,
each printed transformers' "Loading weights" bar and PEFT's ``is_gradient_checkpointing``
FutureWarning, and ``from_config`` jsonargparse's "Unable to serialize instance" three times.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import agon_lightning
import agon_lightning.callbacks

ROOT = Path(__file__).resolve().parents[2]
OURS = (Path(agon_lightning.__file__).parent, Path(agon_lightning.callbacks.__file__).parent)
# A warning as Python prints it ("path.py:12: FutureWarning: ..."), jsonargparse's own form, a tqdm
# bar ("46/46 [00:00<00:00, ...]"), transformers' loading bar, Lightning's tips.
WARNING_LINE = re.compile(r"^(?P<path>\S+\.py):\d+: (?P<category>\w*Warning): ", re.M)
OTHER_NOISE = re.compile(r"JsonargparseWarning|\d+/\d+ \[\d+:\d+|it/s\]|s/it\]|Loading weights|💡 Tip")
# Ignored by a fresh interpreter's default filters (outside __main__): no user sees them.
HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)

sys.path.insert(0, str(ROOT))  # benchmarks/ lives in the checkout, not in the installed package
from benchmarks.bench_serve import make_bundle  # noqa: E402


def ours(path: str) -> bool:
    return any(Path(path).resolve().is_relative_to(folder) for folder in OURS)


def noise(text: str) -> list[str]:
    """The lines of ``text`` that are a dependency's warning, progress bar or tip."""
    found = [m.group(0) for m in WARNING_LINE.finditer(text) if not ours(m["path"])]
    return found + [line for line in text.splitlines() if OTHER_NOISE.search(line)]


def agon(*args: str, cwd: Path) -> subprocess.Popen:
    """``agon ARGS`` started as a user runs it, stdout and stderr together into ``cwd/<command>.log``."""
    command = shutil.which("agon", path=str(Path(sys.executable).parent)) or "agon"
    with open(cwd / f"{args[0]}.log", "w") as log:
        return subprocess.Popen(
            [command, *args],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )


def serve_once(proc: subprocess.Popen, log: Path) -> None:
    """Wait for ``agon serve`` to listen, ask it one question, stop it with SIGTERM."""
    httpx = pytest.importorskip("httpx")
    try:
        deadline = time.monotonic() + 240
        while not (url := re.search(r"^agon serve: (http://\S+)", log.read_text(), re.M)):
            assert proc.poll() is None and time.monotonic() < deadline, (
                "agon serve did not start:\n" + log.read_text()
            )
            time.sleep(0.2)
        body = {"messages": [{"role": "user", "content": "1+1"}], "max_tokens": 4}
        assert httpx.post(f"{url[1]}/chat/completions", json=body, timeout=120).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("quiet") / "bundle", max_new_tokens=4)


@pytest.fixture(scope="module")
def printed(bundle, tmp_path_factory) -> dict[str, tuple[int, str]]:
    """``{command: (exit status, output)}`` of ``agon fit``, ``predict`` and ``serve``, run side by side.

    ``serve`` binds a free port on 127.0.0.1, answers one request and is stopped with SIGTERM.
    """
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    work = tmp_path_factory.mktemp("commands")
    (work / "in.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    procs = {
        "fit": agon(
            "fit", "--config", "agon:agon.yaml", "--trainer.max_steps=1", f"--trainer.default_root_dir={work}/run",
            "--data.init_args.batch_size=2", "--data.init_args.val_size=2", "--data.init_args.train_size=4",
            "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=4", "--threads=1",
            cwd=work,
        ),
        "predict": agon("predict", "--bundle", str(bundle), "--input", "in.jsonl", "--output", "out.jsonl", cwd=work),
        "serve": agon("serve", "--bundle", str(bundle), "--host", "127.0.0.1", "--port", "0", "--threads", "1", cwd=work),
    }  # fmt: skip
    try:
        serve_once(procs["serve"], work / "serve.log")
        for proc in procs.values():
            proc.wait(timeout=300)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {name: (proc.returncode, (work / f"{name}.log").read_text()) for name, proc in procs.items()}


@pytest.fixture
def fresh_process_rules(capfd):
    """Warnings recorded as a fresh interpreter would show them, transformers' bars on, output captured."""
    from transformers.utils import logging as transformers_logging

    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.enable_progress_bar()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    if not was_enabled:
        transformers_logging.disable_progress_bar()


def shown(caught: list[warnings.WarningMessage]) -> list[str]:
    """The recorded warnings a user would see that come from a dependency."""
    return [
        f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}"
        for w in caught
        if not issubclass(w.category, HIDDEN_BY_DEFAULT) and not ours(w.filename)
    ]


def test_the_detector_finds_what_these_entry_points_printed_before():
    before = (
        "Loading weights:   0%|          | 0/46 [00:00<?, ?it/s]Loading weights: 100%|██████████| 46/46\n"
        "/x/site-packages/transformers/modeling_utils.py:3314: FutureWarning: `is_gradient_checkpointing` is\n"
        "/x/site-packages/jsonargparse/_typehints.py:3011: JsonargparseWarning: \n"
        "💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]\n"
    )
    assert len(noise(before)) == 5  # the bar's line, both warnings (one twice: path and name), the tip
    assert noise(f"{OURS[0]}/deploy/cascade.py:10: UserWarning: ours\nstep 1/1 | 0.58 s/step\n") == []


@pytest.mark.slow  # the three commands run side by side, once for the module
def test_agon_fit_prints_no_dependency_noise(printed):
    status, output = printed["fit"]
    assert status == 0 and "step 1/1" in output, output  # it trained, and this is its log
    assert noise(output) == []


@pytest.mark.slow  # the three commands run side by side, once for the module
def test_agon_predict_prints_no_dependency_noise(printed):
    status, output = printed["predict"]
    assert status == 0 and "out.jsonl: 1 rows" in output, output
    assert noise(output) == []


@pytest.mark.slow  # the three commands run side by side, once for the module
def test_agon_serve_prints_no_dependency_noise_at_start_up_or_first_request(printed):
    _, output = printed["serve"]
    assert "POST /v1/chat/completions" in output, output  # the first request's log line is read too
    assert noise(output) == []


def test_cascade_from_pretrained_prints_no_dependency_noise(bundle, fresh_process_rules, capfd):
    from agon_lightning.deploy.cascade import Cascade

    Cascade.from_pretrained(bundle).solve(["1+1"])
    out, err = capfd.readouterr()
    assert noise(out + err) == []
    assert shown(fresh_process_rules) == []


def test_from_config_with_objects_prints_no_dependency_noise(tmp_path, fresh_process_rules, capfd):
    datasets = pytest.importorskip("datasets")
    from agon_lightning import from_config

    def accuracy(completions, solution, **kwargs):
        return [float(s in c[0]["content"]) for c, s in zip(completions, solution)]

    rows = [{"prompt": [{"role": "user", "content": f"{a} + 1 ="}], "solution": str(a + 1)} for a in range(8)]
    dataset = datasets.Dataset.from_list(rows).train_test_split(test_size=2, seed=0)
    model, data, _ = from_config(
        "agon:agon.yaml",
        f"--trainer.default_root_dir={tmp_path}",
        train_dataset=dataset,
        reward_funcs=[accuracy],
    )
    assert type(model.verifier).__name__ == "RewardFunctionVerifier" and len(data.val_problems) == 2
    out, err = capfd.readouterr()
    assert noise(out + err) == []
    assert shown(fresh_process_rules) == []
