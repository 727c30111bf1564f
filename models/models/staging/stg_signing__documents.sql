{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['workspace_id', text],
    ['name', text],
    ['kind', text],
    ['language', text],
    ['folder_id', text],
    ['status', text],
    ['signer_count', dbt.type_int()],
    ['password_protected', dbt.type_boolean()],
    ['theme__id', text],
    ['created_at', type_timestamp_tz()],
    ['updated_at', type_timestamp_tz()],
    ['_deleted_at', type_timestamp_tz()],
    ['_dlt_load_id', text],
] -%}

with

source as (

    {{ signing_completed_rows('documents', columns) }}

),

loads as (

    {{ signing_loads() }}

),

renamed as (

    select
        -- ids
        id as document_id,
        workspace_id,
        folder_id,
        theme__id as theme_id,

        -- properties
        name as document_name,
        kind as document_kind,
        language,
        status as document_status,
        signer_count,
        coalesce(password_protected, false) as is_password_protected,
        _deleted_at is not null as is_deleted,

        -- timestamps
        created_at,
        updated_at,
        _deleted_at as deleted_at,
        loads.loaded_at

    from source
    left join loads
        on source._dlt_load_id = loads.load_id

)

select * from renamed
