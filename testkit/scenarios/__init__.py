"""The fault scenarios of the reliability matrix, one module per family.

``bench.reliability`` runs them all at the full scale and writes ``docs/reliability.md``;
``tests/reliability`` runs each at the fast scale.
"""
