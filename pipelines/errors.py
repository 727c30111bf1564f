"""The one family of errors `pipelines` fails with: each has its exit code and a message of one
line that says what is wrong and what to do, so the CLI, the run records and Dagster can show
it as it is (and catch the base, not a list of classes)."""

from __future__ import annotations


class SigningEtlError(Exception):
    """Root of this package's expected failures: `str()` is one line; `exit_code` is the CLI's."""

    exit_code = 1

    def __str__(self) -> str:
        text = super().__str__()
        return " ".join(text.split()) if "\n" in text or "\r" in text else text


class ConfigError(SigningEtlError):
    """The configuration or an option is incomplete, unknown or malformed."""


class WarehouseError(SigningEtlError):
    """The warehouse cannot be opened, written or read as asked."""


class WarehouseMissing(WarehouseError, FileNotFoundError):
    """There is no warehouse where one was named (a load writes it first)."""


class AlreadyRunning(WarehouseError):
    """Another run holds the warehouse's (or the workspace's) lock."""


class LegacyStateError(WarehouseError):
    """The single state of an earlier version cannot be given to one workspace."""


class ModelsError(SigningEtlError):
    """The dbt models cannot run on this warehouse at all (nothing was run)."""


class ModelsWarehouseMissing(ModelsError, WarehouseMissing):
    """No warehouse to build the models on (dbt would otherwise create an empty one)."""


class ReportError(SigningEtlError):
    """The report cannot be written."""


class QueryRefused(SigningEtlError):
    """A query given to `signing-etl sql` is not one read-only statement."""
