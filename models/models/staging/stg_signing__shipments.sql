{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['workspace_id', text],
    ['document_id', text],
    ['document_name', text],
    ['folder_id', text],
    ['status', text],
    ['activity_status', text],
    ['channel', text],
    ['sign_mode', text],
    ['signature_level', text],
    ['password_protected', dbt.type_boolean()],
    ['final_pdf_ready', dbt.type_boolean()],
    ['sealed', dbt.type_boolean()],
    ['owner_name', text],
    ['owner_email', text],
    ['created_at', type_timestamp_tz()],
    ['expires_at', type_timestamp_tz()],
    ['archived_at', type_timestamp_tz()],
    ['revoked_at', type_timestamp_tz()],
    ['_deleted_at', type_timestamp_tz()],
    ['_dlt_load_id', text],
] -%}

with

source as (

    {{ signing_completed_rows('shipments', columns) }}

),

-- shipments whose audit trail or filled-in fields are still pending (a stopped load)
incomplete as (

    {{ signing_incomplete_shipments() }}

),

loads as (

    {{ signing_loads() }}

),

flagged as (

    select
        source.*,
        incomplete.shipment_id is null as is_history_complete,
        loads.loaded_at

    from source
    left join incomplete
        on source.workspace_id = incomplete.workspace_id
        and source.id = incomplete.shipment_id
    left join loads
        on source._dlt_load_id = loads.load_id

),

renamed as (

    select
        -- ids
        id as shipment_id,
        workspace_id,
        document_id,
        folder_id,

        -- properties
        document_name,
        status as shipment_status,
        activity_status,
        channel,
        sign_mode,
        signature_level,
        owner_name,
        owner_email,

        -- booleans
        coalesce(password_protected, false) as is_password_protected,
        coalesce(final_pdf_ready, false) as is_final_pdf_ready,
        coalesce(sealed, false) as is_sealed,
        archived_at is not null as is_archived,
        is_history_complete,
        _deleted_at is not null as is_deleted,

        -- timestamps
        created_at,
        expires_at,
        archived_at,
        revoked_at,
        _deleted_at as deleted_at,
        loaded_at

    from flagged

)

select * from renamed
