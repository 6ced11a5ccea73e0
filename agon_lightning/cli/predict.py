"""``agon predict``: the command, over the deployed cascade of :mod:`agon_lightning.deploy.predict`.

``--bundle`` runs the cascade with no Trainer; ``--config`` is LightningCLI's ``predict`` on a
training config (see :mod:`agon_lightning.deploy.predict` for both forms).
"""

from __future__ import annotations

import sys

from agon_lightning.data.files import ProblemFields
from agon_lightning.deploy.predict import build_parser, predict_file


def predict_main(argv: list[str] | None = None) -> None:
    """Entry point of ``agon predict`` (both forms; see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-c", "--config") or a.startswith("--config=") for a in argv):
        from agon_lightning.cli.game import AgonCLI

        AgonCLI(args=["predict", *argv])
        return
    args = build_parser().parse_args(argv)
    fields = ProblemFields(args.question_field, args.answer_field, args.metadata_field or None)
    summary = predict_file(
        args.bundle,
        args.input,
        args.output,
        args.drafter,
        args.k,
        args.batch_size,
        fields,
        args.split,
        args.subset,
        args.base_model,
        args.device,
        args.dtype,
        args.seed,
        args.backend,
    )
    print(f"{args.output}: {summary}")
    if summary.unverifiable:
        print(
            f"{summary.unverifiable} rows could not be judged by the bundle's verifier (their verdict's "
            f'"reason" says why); their answers are written, ungraded',
            file=sys.stderr,
        )
    if summary.errors:
        print(
            f'{summary.errors} input rows could not be read; see their "error" records in {args.output}',
            file=sys.stderr,
        )
        raise SystemExit(1)
