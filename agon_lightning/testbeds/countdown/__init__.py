"""The Countdown testbed: a search whose length varies, with summaries of checkable claims.

- ``task.py``: the trace, the summary and the answer (pure functions);
- ``summarizer.py``: what a challenger reads of a draft (``CountdownSummarizer``);
- ``sft.py``: the base's SFT examples (``CountdownExamples``);
- ``preconditions.py``: what a base must show before any comparison.

The statements reasoning-gym's generator can draw (the counted space) are the data's:
:mod:`agon_lightning.data.statements`. The experiments' analyses (sizing, the oracle, S1's and
S2's endpoints) read committed runs and live with them, in the checkout's ``experiments/countdown/``.
Configs: ``configs/countdown.yaml`` and ``configs/sft_countdown.yaml``. Design and results:
``benchmarks/results/countdown/``; the page: ``docs/testbeds/countdown.md``.
"""
