{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['shipment_id', text],
    ['recipient_id', text],
    ['field_id', text],
    ['workspace_id', text],
    ['external_id', text],
    ['document_name', text],
    ['recipient_name', text],
    ['recipient_email', text],
    ['recipient_status', text],
    ['recipient_signed_at', type_timestamp_tz()],
    ['label', text],
    ['type', text],
    ['required', dbt.type_boolean()],
    ['value', text],
] -%}

with

source as (

    {{ signing_completed_rows('shipment_fields', columns) }}

),

renamed as (

    select
        -- ids
        shipment_id,
        recipient_id,
        field_id,
        workspace_id,
        external_id,

        -- properties
        document_name,
        recipient_name,
        recipient_email,
        recipient_status,
        label as field_label,
        type as field_type,
        coalesce(required, false) as is_required,

        -- the filled-in value, typed per field type
        value is not null as is_filled,
        value as raw_value,
        case when type = 'text' then value end as text_value,
        case
            when type = 'payment' then {{ json_text('value', 'variantId') }}
        end as payment_variant_id,
        case
            when type = 'payment' then {{ json_fragment('value', 'extras') }}
        end as payment_extras,

        -- timestamps
        recipient_signed_at

    from source

)

select * from renamed
