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
] -%}

with

source as (

    {{ signing_completed_rows('contacts', columns) }}

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

        -- timestamps
        created_at,
        updated_at

    from source

)

select * from renamed
