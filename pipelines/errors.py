"""The one family of errors `pipelines` fails with: each has its exit code and a message of one
line that says what is wrong and what to do, so the CLI, the run records and Dagster can show
it as it is (and catch the base, not a list of classes)."""

from __future__ import annotations

import duckdb
import psycopg
import psycopg2
from dlt.common.configuration.exceptions import ConfigFieldMissingException
from dlt.destinations.exceptions import DatabaseException
from dlt.pipeline.exceptions import PipelineStepFailed

from sources.signing import PrivacyConfigError, SigningAPIError


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


class WebhooksError(SigningEtlError):
    """A webhook subscription, the receiver or its inbox cannot do what was asked."""


class QueryRefused(SigningEtlError):
    """A query given to `signing-etl sql` is not one read-only statement."""

    RULE = "sql runs exactly one read-only statement (select, with, values, explain)"


# What a run may end with as a recorded outcome and one line, not a bug's traceback: ours, the
# service's, a setting missing or wrong, a failed dlt step, the database's own errors (a server
# that stopped, a conflict) and the machine's (a full disk, a folder that cannot be written).
EXPECTED_FAILURES: tuple[type[BaseException], ...] = (
    SigningEtlError,
    SigningAPIError,
    ConfigFieldMissingException,
    PrivacyConfigError,
    PipelineStepFailed,
    DatabaseException,
    psycopg2.Error,
    psycopg.Error,
    duckdb.Error,
    OSError,
)


def failure_reason(error: BaseException) -> str:
    """The one line a failure is shown and recorded with: the innermost cause that is one of
    ours (or a missing setting); else, for a failed dlt step, the step and its innermost cause
    (dlt's own message names only the step)."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        if isinstance(cause, ConfigFieldMissingException):
            return missing_config_reason(cause)
        if isinstance(cause, SigningEtlError | SigningAPIError):
            return str(cause)
        cause = cause.__cause__ or cause.__context__ or getattr(cause, "exception", None)
    innermost = chain[-1]
    said = f"{type(innermost).__name__}: {_first_line(innermost)}"
    if isinstance(error, PipelineStepFailed):
        return f"the {error.step} step failed: {said}"
    return _first_line(error) if error is innermost else said


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def missing_config_reason(error: ConfigFieldMissingException) -> str:
    """What is missing and the setting that gives it: a destination's credentials, or the
    source's key and base URL."""
    fields = ", ".join(error.fields)
    if error.spec_name.endswith("ClientConfiguration"):  # a dlt destination's configuration
        name = error.spec_name.removesuffix("ClientConfiguration").lower()
        example = " (postgresql://user:password@host:port/database)" if name == "postgres" else ""
        return (
            f"missing configuration: the {name} destination's {fields}; set "
            f"DESTINATION__{name.upper()}__CREDENTIALS{example} or "
            f"[destination.{name}.credentials] in .dlt/secrets.toml"
        )
    return (
        f"missing configuration: {fields}; set SOURCES__SIGNING__API_KEY and "
        "SOURCES__SIGNING__BASE_URL (or .dlt/secrets.toml, .dlt/config.toml)"
    )
