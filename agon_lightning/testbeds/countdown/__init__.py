"""The Countdown testbed: a search whose length varies, with summaries of checkable claims.

- ``task.py``: the trace, the summary and the answer (pure functions), and the counted space;
- ``summarizer.py``: what a challenger reads of a draft (``CountdownSummarizer``);
- ``sft.py``: the base's SFT examples (``CountdownExamples``);
- ``preconditions.py``, ``oracle.py``: what a base must show before any comparison;
- ``sizing.py``, ``endpoints.py`` (S1), ``s2_endpoints.py``, ``s2_pilot.py``: the experiments' analyses.

Configs: ``configs/countdown.yaml`` and ``configs/sft_countdown.yaml``. Design and results:
``benchmarks/results/countdown/``; the page: ``docs/testbeds/countdown.md``.
"""
