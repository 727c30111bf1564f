-- One row per workspace and recipient who was sent the document: from when the shipment
-- waited on them (the document reached them) until they signed or the shipment ended
-- (completed, expired, revoked); `is_waiting` while neither happened: the pending signers,
-- and since when. "Who was the shipment waiting on at time T" is the rows with
-- `waiting_since <= T` and `waiting_until` null or later than T. Over fct_recipients and
-- fct_shipment_status_intervals (history complete, not deleted).

with

recipients as (

    select * from {{ ref('fct_recipients') }}
    where sent_at is not null

),

endings as (

    select workspace_id, shipment_id, shipment_status, valid_from as ended_at
    from {{ ref('fct_shipment_status_intervals') }}
    where interval_number = 2

),

waits as (

    select
        recipients.workspace_id,
        recipients.shipment_id,
        recipients.recipient_id,
        recipients.contact_id,
        recipients.document_id,
        recipients.workspace_name,
        recipients.recipient_name,
        recipients.recipient_email,
        recipients.recipient_company,
        recipients.recipient_position,
        recipients.flow_position,
        recipients.is_opened,
        recipients.sent_at as waiting_since,
        case
            when recipients.signed_at is not null
                and (endings.ended_at is null or recipients.signed_at <= endings.ended_at)
                then recipients.signed_at
            else endings.ended_at
        end as waiting_until,
        case
            when recipients.signed_at is not null
                and (endings.ended_at is null or recipients.signed_at <= endings.ended_at)
                then 'signed'
            else endings.shipment_status
        end as waiting_ended_by

    from recipients
    left join endings
        on recipients.workspace_id = endings.workspace_id
        and recipients.shipment_id = endings.shipment_id

),

final as (

    select
        -- ids
        recipient_id,
        shipment_id,
        workspace_id,
        contact_id,
        document_id,

        -- properties
        workspace_name,
        recipient_name,
        recipient_email,
        recipient_company,
        recipient_position,
        flow_position,
        waiting_ended_by,

        -- booleans
        waiting_until is null as is_waiting,
        is_opened,

        -- timestamps
        waiting_since,
        waiting_until,

        -- durations
        {{ hours_between('waiting_since', 'waiting_until') }} as hours_waited,

        -- keys across workspaces
        {{ workspace_key('recipient_id') }} as recipient_key,
        {{ workspace_key('shipment_id') }} as shipment_key

    from waits

)

select * from final
