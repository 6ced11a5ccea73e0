"""The analyses of the Countdown experiments (the testbed: ``agon_lightning/testbeds/countdown/``).

- ``oracle.py``: what the SFT formats allow at best, measured as the preconditions measure a base;
- ``sizing.py``: the held-out sizes a sweep row needs, from a pilot;
- ``endpoints.py``: S1's pre-registered endpoints and decisions;
- ``s2_pilot.py``, ``s2_endpoints.py``, ``s2_audit.py``: S2's pilot, its registered endpoints,
  and the audit of what its design says of itself;
- ``s3_power.py``, ``s3_states.py``: S3's seeds from S2's variance components, and its split by
  state counted on the generated SFT data.

Designs and results: ``benchmarks/results/countdown/`` (S1), ``benchmarks/results/countdown/s2/``
and ``benchmarks/results/countdown/s3/``.
"""
