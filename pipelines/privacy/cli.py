"""`signing-etl forget`: erase one person from the warehouse on request (`erasure`), rebuild the
models, and say what changed per table, never the address."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.console import output
from pipelines.console.commands import fail, warehouse_named
from pipelines.console.options import WarehouseDestination, WarehouseFile
from pipelines.console.output import PlainTable
from pipelines.console.tables import out
from pipelines.errors import failure_reason
from pipelines.modeling.cli import build_models_or_fail
from pipelines.privacy.erasure import ErasureResult, forget_person
from pipelines.raw.privacy_gate import KEY_SETTING
from pipelines.warehouse import DEFAULT_DESTINATION, DEFAULT_WAREHOUSE


def forget_command(
    email: Annotated[
        str | None, typer.Option("--email", help="The person's e-mail address (any case).")
    ] = None,
    contact_id: Annotated[
        str | None,
        typer.Option("--contact-id", help="Or a contact's id: the person its address names."),
    ] = None,
    workspace: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            help="With --contact-id: the workspace of the contact (its id, the name `load` ran "
            "it under, or its name at the service), when the id is in several.",
        ),
    ] = None,
    duckdb: WarehouseFile = DEFAULT_WAREHOUSE,
    destination: WarehouseDestination = DEFAULT_DESTINATION,
    no_models: Annotated[bool, typer.Option("--no-models", help="Skip the dbt models.")] = False,
) -> None:
    """Erase one person from every table of every workspace (contacts, recipients, filled-in
    values, the audit events they acted in), rebuild the models, and record the erasure as a
    keyed hash so that no later load brings them back. Needs SOURCES__SIGNING__PRIVACY__HASH_KEY."""

    if (email is None) == (contact_id is None):
        raise fail("name one person: --email ADDRESS or --contact-id ID", 2)
    if email is not None and workspace is not None:
        raise fail("--workspace goes with --contact-id: an address is erased everywhere", 2)
    warehouse = warehouse_named(duckdb, destination)
    try:
        result = forget_person(warehouse, email=email, contact_id=contact_id, workspace=workspace)
    except Exception as error:  # ours, a missing setting, the database's own: one line
        raise fail(f"forget: {failure_reason(error)}") from None
    _print_erasure(result)
    if no_models:
        output.warning("the marts were dropped with the person's rows: run `signing-etl models`")
    else:
        build_models_or_fail(warehouse)


def _print_erasure(result: ErasureResult) -> None:
    """Rows changed per table (a table, or one JSON record), and what could not be searched."""
    if output.is_json():
        output.info("erased", changed=result.changed, recorded_as=result.subject)
    else:
        table = PlainTable("table", "rows deleted or cleared", title="Erased")
        for name, rows in sorted(result.changed.items()):
            table.add_row(name, f"{rows:,}")
        if not result.changed:
            table.add_row("(no row held the person)", "0")
        out.print(table)
    if not result.changed:  # a typo, or someone not loaded yet: both are recorded
        output.warning(
            "no row of this warehouse held the person: check the address or id (the erasure "
            "is recorded all the same, so that no later load brings them in)"
        )
    if not output.is_json():
        output.info(
            f"Recorded as {result.subject[:16]}… (a keyed hash, not the address): later loads "
            "clear this person the same way"
        )
    output.warning(
        f"from now on every load and webhook drain needs this hash key (id {result.key_id}) to "
        f"recognise the person: keep {KEY_SETTING} set to it; a load without it stops before "
        "fetching anything, recorded as a failed run that `signing-etl status` shows",
        hash_key_id=result.key_id,
    )
    if not result.compacted:
        output.warning(
            "the warehouse file could not be compacted: old values stay in its free blocks"
        )
    for column in result.unsearchable:
        output.warning(
            f"{column} is masked or dropped (or hashed with another key) here, so it could not "
            "be searched for the address"
        )
