"""The ``tasks`` split: 35 self-contained scaling tasks answered as JSON rows.

Every task states every number it needs, so answers never depend on recalling a chip's spec.
Expected outputs are computed by executing each task's reference solution (``solutions/``)
when the bank loads; ``expected.json`` is the stored snapshot that ``tasks verify`` checks."""
