"""Training: the game's step, its math, and the supervised warm start.

- :mod:`~agon_lightning.training.module`: ``AgonModule``, the LightningModule whose
  ``training_step`` plays one round of the game;
- :mod:`~agon_lightning.training.grpo`: the GRPO loss, advantages and chunked log-probs (pure functions);
- :mod:`~agon_lightning.games.schedule`: who drafts and who challenges, step by step;
- :mod:`~agon_lightning.training.lr_schedule`: warm-up and decay;
- :mod:`~agon_lightning.training.validation`: the cascade evaluated on held-out splits;
- :mod:`~agon_lightning.training.sft` and :mod:`~agon_lightning.training.sft_data`: ``agon sft``.
"""
