"""Running model-written programs: the sandbox (:mod:`.sandbox`: slots and uids; :mod:`.session`: one
program run after run; :mod:`.launcher`: the confined half) and the judge's pure helpers
(:mod:`.judge`: find the program in a completion, compare outputs)."""
