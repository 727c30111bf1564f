{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['workspace_id', text],
    ['name', text],
    ['email', text],
    ['phone', text],
    ['company', text],
    ['position', text],
    ['notes', text],
    ['created_at', type_timestamp_tz()],
    ['updated_at', type_timestamp_tz()],
    ['_deleted_at', type_timestamp_tz()],
    ['_dlt_load_id', text],
] -%}

with

source as (

    {{ signing_completed_rows('contacts', columns) }}

),

loads as (

    {{ signing_loads() }}

),

renamed as (

    select
        -- ids
        id as contact_id,
        workspace_id,

        -- properties
        name as contact_name,
        email as contact_email,
        phone as contact_phone,
        company as contact_company,
        {{ quoted_column('position') }} as job_position,
        notes,
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
