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
] -%}

with

source as (

    {{ signing_completed_rows('documents', columns) }}

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
        _deleted_at as deleted_at

    from source

)

select * from renamed
