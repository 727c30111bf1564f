{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['contact_id', text],
    ['workspace_id', text],
    ['key', text],
    ['value', text],
] -%}

with

source as (

    {{ signing_completed_rows('contacts__custom', columns, root_table='contacts') }}

),

renamed as (

    select
        contact_id,
        workspace_id,
        -- the key as the service has it, dots included (`crm.account_id`)
        key as property_key,
        value as property_value

    from source

)

select * from renamed
