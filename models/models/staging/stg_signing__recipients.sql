{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['shipment_id', text],
    ['workspace_id', text],
    ['link_id', text],
    ['position', dbt.type_int()],
    ['name', text],
    ['email', text],
    ['phone', text],
    ['company', text],
    ['status', text],
    ['delivery_status', text],
    ['last_error', text],
    ['view_count', dbt.type_int()],
    ['sent_at', type_timestamp_tz()],
    ['expires_at', type_timestamp_tz()],
    ['signed_at', type_timestamp_tz()],
    ['last_viewed_at', type_timestamp_tz()],
    ['_deleted_at', type_timestamp_tz()],
] -%}

with

source as (

    {{ signing_completed_rows('shipments__recipients', columns, root_table='shipments') }}

),

renamed as (

    select
        -- ids
        id as recipient_id,
        shipment_id,
        workspace_id,
        link_id,

        -- properties
        {{ quoted_column('position') }} as recipient_position,
        name as recipient_name,
        email as recipient_email,
        phone as recipient_phone,
        company as recipient_company,
        status as recipient_status,
        delivery_status,
        last_error as delivery_error,
        coalesce(view_count, 0) as count_views,
        _deleted_at is not null as is_deleted,

        -- timestamps
        sent_at,
        expires_at,
        signed_at,
        last_viewed_at,
        _deleted_at as deleted_at

    from source

)

select * from renamed
