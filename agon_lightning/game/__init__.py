"""The game's pieces: what every component speaks and what each role is paid.

The plain data that flows between components (:mod:`~agon_lightning.game.types`), the
completion's shape (:mod:`~agon_lightning.game.text`), the two roles' prompts
(:mod:`~agon_lightning.game.prompts`), the format term φ (:mod:`~agon_lightning.game.formats`),
the rewards (:mod:`~agon_lightning.game.rewards`) and the players' names
(:mod:`~agon_lightning.game.names`). The lowest floor: pure code that knows nothing of models,
sampling or training, so every other floor may use it.
"""
