"""Running model-written programs: the sandbox (:mod:`.sandbox`, :mod:`.launcher`) and the judge's
pure helpers (:mod:`.judge`: find the program in a completion, compare outputs)."""
