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
] -%}

with

source as (

    {{ signing_completed_rows('shipments', columns) }}

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

        -- timestamps
        created_at,
        expires_at,
        archived_at,
        revoked_at

    from source

)

select * from renamed
