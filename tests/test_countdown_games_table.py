"""The games' exploratory table comes back from the archive alone: each row's own deployment, minus GRPO."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from agon_lightning.experiments.archive import archive_path, archive_run
from agon_lightning.experiments.stats import crossed_t
from experiments.countdown.games_table import main

N = 40
DEPLOYED = {"grpo": "alpha", "agon": "cascade_ab", "debate": "game"}


def outcomes(variant: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng([len(variant), seed])
    return rng.random(2 * N) < {"grpo": 0.5, "agon": 0.6, "debate": 0.4}[variant] + rng.normal(0, 0.03)


def finished(out: Path, variant: str, seed: int) -> np.ndarray:
    run_dir = out / variant / f"seed_{seed}"
    log = run_dir / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    key = DEPLOYED[variant]
    with (log / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "time/generate_s", "time/update_s", "val/deployed/pass@1"])
        w.writeheader()
        w.writerow({"step": 0, "time/generate_s": 1.0, "time/update_s": 2.0 + seed})
        w.writerow(
            {"step": 1, "time/generate_s": 1.0, "time/update_s": 2.0 + seed, "val/deployed/pass@1": 0.5}
        )
    o = outcomes(variant, seed)
    rows = [
        json.dumps(
            {
                "question": f"q{i % N}",
                "split": "" if i < N else "hard",
                "deployed": key,
                key: bool(o[i]),
                f"{key}/length": 10,
                "base": True,
                "base/length": 3,
            }
        )  # fmt: skip
        for i in range(2 * N)
    ]
    (log / "outcomes.jsonl").write_text("\n".join(rows) + "\n")
    (run_dir / "sweep_done.json").write_text(json.dumps({"argv": [], "wall_s": 1.0}))
    archive_run(run_dir, archive_path(out, variant, seed))
    return o


def test_each_row_is_read_at_its_own_deployment_and_differenced_against_grpo_by_seed_and_problem(tmp_path):
    made = {
        (v, s): finished(tmp_path, v, s)
        for v in ("grpo", "agon", "debate")
        for s in (0, 1, 2)
        if (v, s) != ("debate", 2)
    }
    main([str(tmp_path)])
    records = {r["row"]: r for r in json.loads((tmp_path / "table.json").read_text())}
    agon = records["agon"]
    assert agon["deployed"] == ["cascade_ab"] and not agon["partial"]
    assert agon["main"]["per_seed"] == {
        str(s): pytest.approx(made[("agon", s)][:N].mean()) for s in (0, 1, 2)
    }
    expected = crossed_t(
        np.stack([made[("agon", s)][:N] for s in (0, 1, 2)]).astype(float),
        np.stack([made[("grpo", s)][:N] for s in (0, 1, 2)]).astype(float),
    )
    assert agon["main"]["minus_grpo"]["mean"] == pytest.approx(expected.mean)
    assert agon["main"]["minus_grpo"]["low"] == pytest.approx(expected.low)
    assert agon["seconds_per_step"] == {"0": 3.0, "1": 4.0, "2": 5.0}
    debate = records["debate"]  # deployed as its game's graph; two of three seeds archived
    assert debate["deployed"] == ["game"] and debate["partial"] and debate["seeds"] == [0, 1]
    assert debate["hard"]["mean"] == pytest.approx(np.mean([made[("debate", s)][N:].mean() for s in (0, 1)]))
    assert records["zero_sum"]["seeds"] == []
    text = (tmp_path / "table.md").read_text()
    assert "| zero_sum | — | not run |" in text and "0, 1 (partial)" in text
