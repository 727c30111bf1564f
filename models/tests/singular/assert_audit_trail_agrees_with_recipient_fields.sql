{{ config(severity='warn') }}
-- Where both the audit trail and the recipient record know when someone was sent the
-- document or signed it, they agree (to the second). A disagreement means one of the two
-- sources of funnel timestamps is off; the marts prefer the audit trail.
-- Only shipments whose history is complete: while a stopped load left a shipment's trail
-- pending or older than its recipient records, the two may differ and the marts hold it back.

with

complete_shipments as (

    select workspace_id, shipment_id from {{ ref('stg_signing__shipments') }}
    where is_history_complete

),

recipients as (

    select recipients.*

    from {{ ref('stg_signing__recipients') }} as recipients
    inner join complete_shipments
        on recipients.workspace_id = complete_shipments.workspace_id
        and recipients.shipment_id = complete_shipments.shipment_id

),

recipient_events as (

    select * from {{ ref('int_recipient_events_pivoted') }}

),

final as (

    select
        recipients.workspace_id,
        recipients.recipient_id,
        recipients.sent_at,
        recipient_events.sent_at as event_sent_at,
        recipients.signed_at,
        recipient_events.signed_at as event_signed_at

    from recipients
    inner join recipient_events
        on recipients.workspace_id = recipient_events.workspace_id
        and recipients.recipient_id = recipient_events.recipient_id
    where abs({{ seconds_between('recipients.sent_at', 'recipient_events.sent_at') }}) > 1
        or abs({{ seconds_between('recipients.signed_at', 'recipient_events.signed_at') }})
            > 1

)

select * from final
