"""S2's endpoints come back from the committed archive alone, with the registered interval and Holm's correction."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from agon_lightning.experiments.archive import archive_path, archive_run
from agon_lightning.experiments.stats import crossed_t, holm
from experiments.countdown.s2_endpoints import main

# The keys each row's evaluation writes (deployed first).
KEYS = {"agon": ("cascade_ab", "alpha"), "cooperative": ("cascade_ab", "alpha"), "grpo": ("alpha", "cascade_aa"),
        "moa_untrained": ("alpha", "moa"), "league": ("cascade_ab", "alpha"),
        "kl_anchor": ("cascade_ab", "alpha")}  # fmt: skip
RATES = {
    "agon": 0.7,
    "cooperative": 0.65,
    "grpo": 0.5,
    "moa_untrained": 0.55,
    "league": 0.72,
    "kl_anchor": 0.6,
}
N = 60


def outcomes(variant: str, seed: int) -> dict[str, np.ndarray]:
    """Each key's 0/1 outcome on N main and N hard problems: Agon's cascade best, with seed noise."""
    rng = np.random.default_rng(hash((variant, seed)) % 2**32)
    rate = RATES[variant]
    shift = 0.0 if variant == "moa_untrained" else rng.normal(0, 0.03)
    return {key: rng.random(2 * N) < rate + shift - 0.1 * k for k, key in enumerate(KEYS[variant])}


def divergence_values(variant: str, seed: int) -> list[float]:
    """The symmetric KL the monitor logged at steps 0 and 10 (the last is what counts)."""
    return [0.001 * seed, 0.1 + 0.01 * seed + (0.05 if variant == "kl_anchor" else 0.0) + 0.003 * (seed % 2)]


def finished(out: Path, variant: str, seed: int) -> dict[str, np.ndarray]:
    run_dir = out / variant / f"seed_{seed}"
    log = run_dir / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    (log / "config.yaml").write_text(yaml.safe_dump({"model": {"grpo": {"num_generations": 8}},
                                                     "data": {"init_args": {"batch_size": 8}}}))  # fmt: skip
    deployed = KEYS[variant][0]
    row = {"step": 0, "val/base/pass@1": 0.4}
    for key in ("deployed", *KEYS[variant]):
        row |= {
            f"val/{key}/pass@1": 0.5,
            f"val/{key}/length": 9,
            f"val/{key}/conversion_rate": 0.1 + 0.01 * seed,
        }
    first, last = divergence_values(variant, seed)
    metric = "divergence/symmetric_kl"
    later = {**dict.fromkeys(row, ""), "step": 10, metric: last}
    with (log / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*row, metric])
        w.writeheader()
        w.writerow({**row, metric: first})
        w.writerow(later)
        w.writerow({**dict.fromkeys(row, ""), "step": 11, metric: ""})  # a row that does not log it
    o = outcomes(variant, seed)
    rows = []
    for i in range(2 * N):
        row = {"question": f"q{i % N}", "split": "" if i < N else "hard", "deployed": deployed}
        for key, values in o.items():
            row |= {key: bool(values[i]), f"{key}/length": 10}
        rows.append(json.dumps(row))
    (log / "outcomes.jsonl").write_text("\n".join(rows) + "\n")
    (run_dir / "sweep_done.json").write_text(json.dumps({"argv": [], "wall_s": 1.0}))
    archive_run(run_dir, archive_path(out, variant, seed))
    return o


def test_the_primaries_come_from_the_archive_with_the_crossed_interval_and_holm(tmp_path):
    out = tmp_path / "sweep"
    made = {(v, s): finished(out, v, s) for v in ("agon", "cooperative", "grpo") for s in range(5)}
    made["moa_untrained", 0] = finished(out, "moa_untrained", 0)
    for directory in list(out.iterdir()):  # only the archive is committed
        if directory.name != "archive":
            import shutil

            shutil.rmtree(directory)
    main([str(out)])
    record = {
        (e["name"], e["split"]): e for e in json.loads((out / "endpoints.json").read_text())["endpoints"]
    }
    agon = np.array([made["agon", s]["cascade_ab"][:N] for s in range(5)], dtype=float)
    moa = np.array(
        [made["moa_untrained", 0]["moa"][:N]] * 5, dtype=float
    )  # the untrained row stands for every seed
    selfc = np.array([made["grpo", s]["cascade_aa"][:N] for s in range(5)], dtype=float)
    coop = np.array([made["cooperative", s]["cascade_ab"][:N] for s in range(5)], dtype=float)
    names = ["training adds to the untrained cascade: Agon − moa_untrained",
             "two passes on one budget: Agon − GRPO's self-cascade", "the competition step: Agon − cooperative"]  # fmt: skip
    expected = {n: crossed_t(agon, ref) for n, ref in zip(names, (moa, selfc, coop))}
    adjusted = holm({n: d.p for n, d in expected.items()})
    for n, d in expected.items():
        e = record[n, "main"]
        assert (e["mean"], e["low"], e["high"], e["p"]) == pytest.approx((d.mean, d.low, d.high, d.p))
        assert e["p_holm"] == pytest.approx(adjusted[n]) and e["final"]
        want = ("shown" if d.mean > 0 else "contradicted") if adjusted[n] < 0.05 else "not resolved"
        assert e["decision"] == want
    assert record[names[0], "hard"]["p_holm"] is None  # Holm's family: the three main-split primaries
    assert (out / "results.md").is_file() and "| agon | 5 |" in (out / "results.md").read_text()
    assert "**primary: " in (out / "endpoints.md").read_text()
    cascades = {
        (r["row"], r["split"]): r for r in json.loads((out / "endpoints.json").read_text())["cascades"]
    }
    agon_main = cascades["agon", "main"]  # the deployed cascade's rate, seed mean and sd over 5 seeds
    assert agon_main["seeds"] == 5 and agon_main["conversion rate"] == pytest.approx(
        [0.12, np.std([0.1, 0.11, 0.12, 0.13, 0.14], ddof=1)]
    )
    assert (
        cascades["grpo", "main"]["cascade"] == "cascade_aa"
        and cascades["moa_untrained", "main"]["seeds"] == 1
    )


def test_a_row_with_seeds_missing_is_interim(tmp_path):
    out = tmp_path / "sweep"
    for s in range(2):
        finished(out, "agon", s)
        finished(out, "cooperative", s)
    main([str(out)])
    (e,) = [e for e in json.loads((out / "endpoints.json").read_text())["endpoints"]
            if e["name"].startswith("the competition step") and e["split"] == "main"]  # fmt: skip
    assert e["seeds"] == 2 and not e["final"]


def test_part_3_reads_the_league_and_the_kl_anchor_against_agon_in_their_own_family(tmp_path):
    from agon_lightning.experiments.stats import seed_t

    out = tmp_path / "sweep"
    made = {(v, s): finished(out, v, s) for v in ("agon", "league", "kl_anchor", "grpo") for s in range(5)}
    main([str(out), "--family", "league"])
    written = json.loads((out / "endpoints_league.json").read_text())
    record = {(e["name"], e["split"]): e for e in written["endpoints"]}
    agon = np.array([made["agon", s]["cascade_ab"][:N] for s in range(5)], dtype=float)
    names = ["the league: league − Agon", "the KL anchor: kl_anchor − Agon"]
    expected = {
        n: crossed_t(np.array([made[v, s]["cascade_ab"][:N] for s in range(5)], dtype=float), agon)
        for n, v in zip(names, ("league", "kl_anchor"))
    }
    adjusted = holm({n: d.p for n, d in expected.items()})  # a family of two, not part 2's three
    for n, d in expected.items():
        e = record[n, "main"]
        assert (e["mean"], e["low"], e["high"]) == pytest.approx((d.mean, d.low, d.high))
        assert e["p_holm"] == pytest.approx(adjusted[n]) and e["final"]
    assert not any(name.startswith("two passes") for name, _ in record)  # part 2's endpoints are not here
    (kl,) = [
        d
        for d in written["divergence"]
        if d["metric"] == "divergence/symmetric_kl" and d["variant"] == "kl_anchor"
    ]
    mine = np.array([divergence_values("kl_anchor", s)[-1] for s in range(5)])
    theirs = np.array([divergence_values("agon", s)[-1] for s in range(5)])
    want = seed_t(mine[:, None], theirs[:, None])  # the last logged value, paired by seed
    assert (kl["mean"], kl["low"], kl["high"], kl["seeds"]) == pytest.approx(
        (want.mean, want.low, want.high, 5)
    )
    assert kl["mean"] == pytest.approx(0.05)
    text = (out / "endpoints_league.md").read_text()
    assert "--family league" in text and "`grpo`" not in text.split("Runs archived")[1].split("\n")[0]


def test_s3_registers_seventeen_seeds_a_row_and_the_same_adapters_second_pass(tmp_path):
    out = tmp_path / "sweep"
    made = {(v, s): finished(out, v, s) for v in ("agon", "cooperative", "grpo") for s in range(3)}
    finished(out, "moa_untrained", 0)
    main([str(out), "--family", "s3"])
    record = {
        (e["name"], e["split"]): e for e in json.loads((out / "endpoints.json").read_text())["endpoints"]
    }
    name = "the second pass on one adapter: GRPO's self-cascade − GRPO alone"
    selfc = np.array([made["grpo", s]["cascade_aa"][:N] for s in range(3)], dtype=float)
    alone = np.array([made["grpo", s]["alpha"][:N] for s in range(3)], dtype=float)
    d = crossed_t(selfc, alone)
    e = record[name, "main"]
    assert (e["mean"], e["p"]) == pytest.approx((d.mean, d.p)) and e["decision"] == "no decision (secondary)"
    assert e["mde"] is not None and e["mde"] > 0  # a null is read with the effect it could have missed
    primaries = [e for e in record.values() if e["primary"] and e["split"] == "main"]
    assert len(primaries) == 3 and not any(e["final"] for e in primaries)  # 3 of 17 seeds: interim
    assert "--family s3" in (out / "endpoints.md").read_text()
