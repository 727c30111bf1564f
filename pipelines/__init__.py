"""The pipelines that load the signing service into a warehouse, and the `signing-etl` CLI."""
