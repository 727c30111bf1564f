"""The one family of errors `pipelines` fails with: each has its exit code and a message of one
line that says what is wrong and what to do, so the CLI, the run records and Dagster can show
it as it is (and catch the base, not a list of classes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import duckdb
import psycopg
import psycopg2
from dlt.common.configuration.exceptions import (
    ConfigFieldMissingException,
    ConfigurationValueError,
    ConfigValueCannotBeCoercedException,
)
from dlt.destinations.exceptions import DatabaseException
from dlt.pipeline.exceptions import PipelineStepFailed

from pipelines.outcome import EXIT_FAILED
from sources.signing import PrivacyConfigError, RunStopped, SigningAPIError
from sources.signing.errors import one_line


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

    # Whether the warehouse can still take the record of a run that ended with this: true
    # for a refusal of what was asked (a privacy policy these settings cannot write under).
    warehouse_usable: ClassVar[bool] = False
    # Whether a run's other workspaces would meet it too, so a run of several stops there:
    # false for what concerns one workspace alone (its lock held by another run, or lost).
    ends_every_workspace: ClassVar[bool] = True


class WarehousePathError(WarehouseError):
    """The path named is no place for a warehouse (a folder, a device, a dangling link, a
    folder that cannot be written): refused before anything is written, a record included."""


class WarehouseMissing(WarehouseError, FileNotFoundError):
    """There is no warehouse where one was named (a load writes it first)."""


class AlreadyRunning(WarehouseError):
    """Another run holds the warehouse's (or the workspace's) lock, and held it for longer
    than a run waits: a busy resource, stopped on (exit 75) and tried again later. A shared
    database held by another run still takes the record (a DuckDB file's is journaled)."""

    exit_code = 75
    warehouse_usable: ClassVar[bool] = True


class WorkspaceBusy(AlreadyRunning):
    """Another run holds one workspace's lock (in a shared database, or the workspace's lock
    file): that workspace stops (exit 75) and a run of several goes on with the others, so
    workers given the same workspaces share them out instead of queueing behind one."""

    ends_every_workspace: ClassVar[bool] = False


class RunLockLost(WarehouseError):
    """The workspace's run lock in a shared database was lost while the run held it (its
    session ended: a server restart, an operator, a network cut for minutes), so another run
    may be writing the workspace now: stopped before this run's next write (exit 75, tried
    again later). The database still takes the run's record."""

    exit_code = 75
    warehouse_usable: ClassVar[bool] = True
    ends_every_workspace: ClassVar[bool] = False


class LegacyStateError(WarehouseError):
    """The single state of an earlier version cannot be given to one workspace."""


class ModelsError(SigningEtlError):
    """The dbt models cannot run on this warehouse at all (nothing was run)."""


class ModelsUnreachable(ModelsError):
    """The database did not take the connection a build's lock asks for (a server that refuses
    dbt's connection too): a failed build on record, as dbt's own refusal is, not an error."""


class ModelsWarehouseMissing(ModelsError, WarehouseMissing):
    """No warehouse to build the models on (dbt would otherwise create an empty one)."""


class ReportError(SigningEtlError):
    """The report cannot be written."""


class MetricsError(SigningEtlError):
    """The metrics cannot be computed on this warehouse (no semantic layer built yet)."""


class MetricsUsageError(MetricsError):
    """A metric or a group-by that the semantic layer does not define: a usage error."""

    exit_code = 2


class WebhooksError(SigningEtlError):
    """A webhook subscription, the receiver or its inbox cannot do what was asked."""


class QueryRefused(SigningEtlError):
    """A query given to `signing-etl sql` is not one read-only statement."""

    RULE = "sql runs exactly one read-only statement (select, with, values, explain)"


# A setting missing or not of its type, or a privacy policy that makes no sense: a failure
# of the run that meets it, recorded as such (a setting may be one workspace's own).
CONFIGURATION_FAILURES: tuple[type[BaseException], ...] = (
    ConfigFieldMissingException,
    ConfigurationValueError,
    PrivacyConfigError,
)
# What a run may end with as a recorded outcome and one line, not a bug's traceback: ours, the
# service's, the configuration's, a failed dlt step, the database's own errors (a server that
# stopped, a conflict) and the machine's (a full disk, a folder that cannot be written).
EXPECTED_FAILURES: tuple[type[BaseException], ...] = (
    SigningEtlError,
    SigningAPIError,
    *CONFIGURATION_FAILURES,
    PipelineStepFailed,
    DatabaseException,
    psycopg2.Error,
    psycopg.Error,
    duckdb.Error,
    OSError,
)


def exit_code_of(error: BaseException) -> int:
    """The exit code of a run that `error` ended, and so its outcome (`Outcome.from_exit_code`)
    wherever the run is recorded: an error of ours or a stop says its own (75 for a busy or
    lost lock, a daily limit, a budget: tried again later); anything else is a failure (1)."""
    return error.exit_code if isinstance(error, RunStopped | SigningEtlError) else EXIT_FAILED


def failure_reason(error: BaseException) -> str:
    """The one line a failure is shown and recorded with: the innermost cause that is one of
    ours (or a missing setting); else, for a failed dlt step, the step and its innermost cause
    (dlt's own message names only the step)."""
    innermost = error
    for cause in _chain(error):
        innermost = cause
        if isinstance(cause, ConfigFieldMissingException):
            return missing_config_reason(cause)
        if isinstance(cause, ConfigValueCannotBeCoercedException):
            return wrong_type_reason(cause)
        if isinstance(cause, SigningEtlError | SigningAPIError):
            return str(cause)
    said = f"{type(innermost).__name__}: {first_line(innermost)}"
    if isinstance(error, PipelineStepFailed):
        return f"the {error.step} step failed: {said}"
    return first_line(error) if error is innermost else said


def caused_by(error: BaseException, cause: BaseException | None) -> bool:
    """Whether `cause` is `error` or in its chain (dlt wraps what a resource raised)."""
    return any(link is cause for link in _chain(error))


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what caused it, outwards in: Python's cause or context, or the exception
    a dlt step failure wraps; each once (a chain may loop)."""
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in seen:
        seen.append(link)
        yield link
        link = link.__cause__ or link.__context__ or getattr(link, "exception", None)


# SQLSTATEs a retry of the whole run may cure: a transaction rolled back by a conflict (class 40:
# serialization failure, deadlock), a lock not granted in time, a connection lost, and two
# writers creating one schema or table at once (a unique violation in the catalog).
TRANSIENT_SQLSTATES = ("40", "08", "55P03", "57P01", "23505", "42P06", "42P07")


def is_transient(error: BaseException) -> bool:
    """Whether a failure is the database's passing conflict, not a fault that a retry repeats:
    an error in its chain carries a SQLSTATE of `TRANSIENT_SQLSTATES` (psycopg2's `pgcode`,
    psycopg's `sqlstate`, inside dlt's wrappers), or is a connection psycopg2 lost."""
    seen: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in seen:
        seen.append(cause)
        state = getattr(cause, "pgcode", None) or getattr(cause, "sqlstate", None)
        if isinstance(state, str) and state.startswith(TRANSIENT_SQLSTATES):
            return True
        if isinstance(cause, psycopg2.OperationalError) and state is None:
            return True  # "server closed the connection unexpectedly" carries no SQLSTATE
        cause = (
            getattr(cause, "dbapi_exception", None)
            or cause.__cause__
            or cause.__context__
            or getattr(cause, "exception", None)
        )
    return False


def first_line(error: BaseException | str) -> str:
    """The first line of an error's message that says something, its spaces collapsed: what a
    database, dlt or a notebook says goes on for lines of context and hints, and a failure is
    shown in one. An error that says nothing is named by its class."""
    for line in str(error).splitlines():
        if line.strip():
            return " ".join(line.split())
    return "(no message)" if isinstance(error, str) else type(error).__name__


def wrong_type_reason(error: ConfigValueCannotBeCoercedException) -> str:
    """A setting that is not of its type, with the value given (a number or a word, never a
    secret: a key is text, which any value is) and, for the source's, where it is set."""
    name = str(error.field_name)
    kind = getattr(error.hint, "__name__", str(error.hint))
    return (
        f"the setting {name} must be of type {kind}, not {one_line(repr(error.field_value), 40)} "
        f"(for the source: SOURCES__SIGNING__{name.upper()}, or {name} under [sources.signing] "
        "in .dlt/config.toml)"
    )


def missing_config_reason(error: ConfigFieldMissingException) -> str:
    """What is missing and the setting that gives it: a destination's credentials, or the
    source's key and base URL."""
    fields = ", ".join(error.fields)
    if error.spec_name.endswith("ClientConfiguration"):  # a dlt destination's configuration
        spec = error.spec_name.removesuffix("ClientConfiguration").removesuffix("Destination")
        name = spec.lower()
        example = " (postgresql://user:password@host:port/database)" if name == "postgres" else ""
        variables = " and ".join(f"DESTINATION__{name.upper()}__{f.upper()}" for f in error.fields)
        return (
            f"missing configuration: the {name} destination's {fields}; set "
            f"{variables}{example} or {fields} under [destination.{name}] in .dlt/secrets.toml"
        )
    return (
        f"missing configuration: {fields}; set SOURCES__SIGNING__API_KEY and "
        "SOURCES__SIGNING__BASE_URL (or .dlt/secrets.toml, .dlt/config.toml)"
    )
