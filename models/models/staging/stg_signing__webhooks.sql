{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['workspace_id', text],
    ['event', text],
    ['target_url', text],
    ['is_active', dbt.type_boolean()],
    ['delivery_count', dbt.type_int()],
    ['failure_count', dbt.type_int()],
    ['last_error', text],
    ['created_at', type_timestamp_tz()],
    ['last_delivered_at', type_timestamp_tz()],
] -%}

with

source as (

    {{ signing_completed_rows('webhooks', columns) }}

),

renamed as (

    select
        -- ids
        id as webhook_id,
        workspace_id,

        -- properties
        event as event_name,
        target_url,
        coalesce(is_active, false) as is_active,
        coalesce(delivery_count, 0) as count_deliveries,
        coalesce(failure_count, 0) as count_failures,
        last_error,

        -- timestamps
        created_at,
        last_delivered_at

    from source

)

select * from renamed
