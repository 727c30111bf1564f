"""A Postgres warehouse beyond what dlt does with it: the dbt target (the environment
`models/profiles.yml` reads for its `postgres` output, filled from the dlt credentials the load
uses, so the user writes no second profile and the password travels only as a dbt secret), and
the one read-only statement of `signing-etl sql`."""

from __future__ import annotations

import importlib.util
from typing import Any

import dlt
import psycopg

from pipelines.errors import ConfigError, ModelsError, QueryRefused, first_line

POSTGRES = "postgres"

# Connection-string options the dbt target takes, and the libpq variable each becomes.
LIBPQ_ENVIRONMENT = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
    "channel_binding": "PGCHANNELBINDING",
    "gssencmode": "PGGSSENCMODE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "options": "PGOPTIONS",
    "client_encoding": "PGCLIENTENCODING",
    "application_name": "PGAPPNAME",
}


def dbt_environment(destination: str) -> dict[str, str]:
    """The environment of the dbt target named `destination` (a profiles.yml output), from the
    dlt configuration the load uses; a one-line ModelsError when it cannot be built."""
    if destination != POSTGRES:
        raise ModelsError(
            f"the models build on duckdb and postgres; for {destination}, run dbt with a "
            "profile of your own on the `raw` dataset"
        )
    if importlib.util.find_spec("dbt.adapters.postgres") is None:
        raise ModelsError(
            "dbt's postgres adapter is not installed: `uv sync` (or pip install dbt-postgres)"
        )
    credentials = _postgres_credentials(ModelsError)
    environment = {
        "SIGNING_PG_HOST": str(credentials.host),
        "SIGNING_PG_PORT": str(credentials.port or 5432),
        "SIGNING_PG_USER": str(credentials.username),
        "DBT_ENV_SECRET_SIGNING_PG_PASSWORD": str(credentials.password or ""),
        "SIGNING_PG_DATABASE": str(credentials.database),
        "SIGNING_PG_CONNECT_TIMEOUT": str(credentials.connect_timeout or 15),
    }
    # Options of the connection string (`?sslmode=verify-full&sslrootcert=...`) reach libpq as
    # its environment variables, which apply to whatever dbt's profile leaves unset.
    for name, value in (credentials.query or {}).items():
        if name in LIBPQ_ENVIRONMENT:
            environment[LIBPQ_ENVIRONMENT[name]] = str(value)
        elif name != "connect_timeout":
            raise ModelsError(
                f"the Postgres credentials' option {name!r} is not passed on to dbt; "
                f"the models take {', '.join(sorted(LIBPQ_ENVIRONMENT))} and connect_timeout"
            )
    return environment


# What `sql` runs on PostgreSQL: the text as a subquery, where the server's grammar takes a query
# alone (select, with, values, table); a newline ends a trailing `--` comment before the `)`.
AS_SUBQUERY = 'select * from (\n{query}\n) as "signing_etl_query"'
QUERY_RULE = (
    "sql runs exactly one read-only statement (on PostgreSQL a query: select, with, values)"
)


def read_only_statement(
    query: str, most: int, *, in_utc: bool = False
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and at most `most` rows of one query, run in a read-only transaction
    that is rolled back, on a connection of its own (`in_utc`: the session's time zone UTC,
    so weeks and days are cut as the marts cut them).

    The text goes inside a subquery (`AS_SUBQUERY`), sent in one Parse message of the
    extended protocol, so the server's own parser refuses what is not one query: a second
    statement (a `commit; begin read write; ...` cannot end the read-only transaction), and a
    command that is no query, such as `copy ... to program`, which runs a program on the
    server in a read-only transaction too. A write inside the query (a data-modifying `with`)
    is refused by the transaction.

    Raises:
        QueryRefused: not one query, or a writing one (one line).
        ConfigError: the credentials are missing or unusable.
    """
    wrapped = AS_SUBQUERY.format(query=query.rstrip().rstrip(";"))
    with psycopg.connect(connection_url()) as connection:
        connection.read_only = True
        try:
            with connection.cursor() as cursor:
                if in_utc:
                    cursor.execute("set time zone 'UTC'")
                cursor.execute(wrapped.encode(), prepare=True)
                names = [column.name for column in cursor.description or []]
                rows = [tuple(row) for row in cursor.fetchmany(most)] if names else []
        except psycopg.errors.SyntaxError as error:
            if "multiple commands" in str(error):
                raise QueryRefused(QUERY_RULE) from None
            raise QueryRefused(f"{QUERY_RULE}: {first_line(error)}") from None
        except (psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.FeatureNotSupported) as error:
            # A write, or a data-modifying `with`, which a subquery may not hold.
            raise QueryRefused(f"{QUERY_RULE} ({first_line(error)})") from None
        finally:
            connection.rollback()
    return names, rows


def connection_url() -> str:
    """The connection string of the Postgres destination a load uses (for sessions of our own,
    such as the run lock's).

    Raises:
        ConfigError: the credentials are missing or unusable (one line, never quoting them).
    """
    return str(_postgres_credentials(ConfigError).to_native_representation())


def _postgres_credentials(error_class: type[Exception]) -> Any:
    """dlt's `postgres` destination credentials, resolved as a load resolves them (a connection
    string or field by field, from `.dlt/secrets.toml` or the environment)."""
    from dlt.common.configuration.exceptions import ConfigurationException
    from dlt.destinations.impl.postgres.configuration import PostgresClientConfiguration

    hint = (
        "set DESTINATION__POSTGRES__CREDENTIALS=postgresql://user:password@host:port/database "
        "(or [destination.postgres.credentials] in .dlt/secrets.toml), as for the load"
    )
    try:
        configuration = dlt.destinations.postgres().configuration(
            PostgresClientConfiguration(), accept_partial=True
        )
    except ConfigurationException:
        # dlt's message may quote the value; say only what is wrong with it.
        raise error_class(f"the Postgres credentials are not a connection string: {hint}") from None
    credentials = configuration.credentials
    if credentials is None or not credentials.is_resolved():
        missing = [
            name
            for name in ("host", "username", "password", "database")
            if credentials is None or getattr(credentials, name) is None
        ]
        raise error_class(f"no Postgres credentials ({', '.join(missing)} missing): {hint}")
    return credentials
