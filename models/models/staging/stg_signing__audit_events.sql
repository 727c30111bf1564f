{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['shipment_id', text],
    ['workspace_id', text],
    ['recipient_id', text],
    ['type', text],
    ['at', type_timestamp_tz()],
    ['actor__name', text],
    ['actor__ip', text],
] -%}

with

source as (

    {{ signing_completed_rows('audit_events', columns) }}

),

renamed as (

    select
        -- ids
        id as audit_event_id,
        shipment_id,
        workspace_id,
        recipient_id,

        -- properties
        type as event_type,
        actor__name as actor_name,
        actor__ip as actor_ip,

        -- timestamps
        {{ quoted_column('at') }} as occurred_at

    from source

)

select * from renamed
