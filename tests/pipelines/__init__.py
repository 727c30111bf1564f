"""End-to-end tests of `signing-etl` run as a subprocess."""
