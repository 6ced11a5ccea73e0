"""Experiment tooling: ``agon sweep`` (the paper's variants x seeds), its results tables and plots.

- :mod:`~agon_lightning.experiments.sweep`: the runs, one ``agon fit`` each, resumable;
- :mod:`~agon_lightning.experiments.sweep_report`: the results table over the runs' outcomes;
- :mod:`~agon_lightning.experiments.paper_table`: the paper's table beside ours;
- :mod:`~agon_lightning.experiments.stats`: paired tests and intervals across seeds;
- :mod:`~agon_lightning.experiments.plots`: validation curves, of one run or a sweep.

Nothing in training or deployment imports from here, except the end-of-run plot
(:class:`~agon_lightning.callbacks.ValidationReport` draws with :mod:`.plots`).
"""
