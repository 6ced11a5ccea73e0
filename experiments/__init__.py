"""The experiments' analyses: each recomputes a registered design's figures from its committed runs.

They read ``benchmarks/results/`` and the shipped configs of a checkout, so they live beside
``benchmarks/`` (which measures speed and memory) and are run from the checkout's root
(``python -m experiments.countdown.s2_endpoints ...``); they are not installed with the package.
Outside the package they may use any part of it, a testbed included; nothing in the package
imports them. The tools they share, the sweep and its statistics, are in
:mod:`agon_lightning.experiments`.
"""
