from agon_lightning.experiments.report import pass_at_1_stderr, start_end_table

HISTORY = [
    (
        0,
        {
            "val/base/pass@1": 0.3,
            "val/base/length": 40.0,
            "val/cascade_ab/pass@1": 0.3,
            "val/cascade_ab/length": 41.0,
        },
    ),
    (
        60,
        {
            "val/base/pass@1": 0.3,
            "val/base/length": 40.0,
            "val/cascade_ab/pass@1": 0.55,
            "val/cascade_ab/length": 35.0,
        },
    ),
]


def test_start_end_table():
    table = start_end_table(HISTORY)
    assert "| cascade_ab | 0.300 | 0.550 | +0.250 | 41.0 | 35.0 |" in table
    assert "| base | 0.300 | 0.300 | +0.000 |" in table
    assert start_end_table([]) == "(no validation was run)"


def test_stderr():
    assert abs(pass_at_1_stderr(0.5, 100) - 0.05) < 1e-12
