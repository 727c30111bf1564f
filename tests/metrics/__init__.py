"""Tests of `pipelines/metrics/`: the semantic layer and `signing-etl metrics`."""
