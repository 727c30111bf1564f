-- One row per workspace and recipient of a shipment whose history is complete (and not deleted)
-- (stg_signing__shipments `is_history_complete`; shipments still loading are held back): when
-- the document reached, opened and was signed by them, where they stand in a sequential flow,
-- and how long they waited for the signer before them. Milestones come from the audit trail
-- where it has them, else from the recipient's own fields (see the YAML for each column's
-- source). Ids are unique only within a workspace: every join carries `workspace_id`.

with

recipients as (

    select * from {{ ref('stg_signing__recipients') }}

),

shipments as (

    select * from {{ ref('stg_signing__shipments') }}
    where is_history_complete
        and not is_deleted

),

recipient_events as (

    select * from {{ ref('int_recipient_events_pivoted') }}

),

-- A trail cut at the API's cap lost its oldest events. A single event (sent, delivered,
-- signed) that is there is right; the first of a repeated one (opened, delivery_failed) is
-- only the first loaded, unless the recipient's `sent` event is there too: everything after
-- the oldest loaded event is loaded, and nothing happens to a recipient before sending.
trusted_events as (

    select
        workspace_id,
        recipient_id,
        sent_at,
        delivered_at,
        case
            when not is_audit_trail_truncated or sent_at is not null
                then delivery_failed_at
        end as delivery_failed_at,
        case
            when not is_audit_trail_truncated or sent_at is not null then first_opened_at
        end as first_opened_at,
        last_opened_at,
        signed_at,
        count_opened_events

    from recipient_events

),

contacts_by_email as (

    select * from {{ ref('int_contacts_deduplicated_by_email') }}

),

milestones as (

    select
        recipients.recipient_id,
        recipients.shipment_id,
        recipients.workspace_id,
        contacts_by_email.contact_id,
        shipments.document_id,
        shipments.document_name,
        shipments.signature_level,
        shipments.sign_mode,
        shipments.shipment_status,
        recipients.recipient_position,
        recipients.recipient_name,
        recipients.recipient_email,
        recipients.recipient_company,
        recipients.recipient_status,
        recipients.delivery_status,
        recipients.delivery_error,
        greatest(recipients.count_views, coalesce(recipient_events.count_opened_events, 0))
            as count_views,

        coalesce(recipient_events.sent_at, recipients.sent_at) as sent_at,
        recipient_events.delivered_at,
        recipient_events.delivery_failed_at,
        coalesce(
            recipient_events.first_opened_at,
            -- with a single view, the last view is the first one
            case when recipients.count_views = 1 then recipients.last_viewed_at end
        ) as first_opened_at,
        coalesce(recipients.last_viewed_at, recipient_events.last_opened_at) as last_viewed_at,
        coalesce(recipient_events.signed_at, recipients.signed_at) as signed_at,
        recipients.expires_at

    from recipients
    inner join shipments
        on recipients.workspace_id = shipments.workspace_id
        and recipients.shipment_id = shipments.shipment_id
    left join trusted_events as recipient_events
        on recipients.workspace_id = recipient_events.workspace_id
        and recipients.recipient_id = recipient_events.recipient_id
    left join contacts_by_email
        on recipients.workspace_id = contacts_by_email.workspace_id
        and lower(trim(recipients.recipient_email)) = contacts_by_email.email_key

),

stages as (

    select
        *,
        sent_at is not null
            or recipient_status in ('sent', 'opened', 'signed') as is_sent,
        delivered_at is not null or delivery_status = 'delivered' as is_delivered,
        delivery_failed_at is not null or delivery_status = 'failed' as is_delivery_failed,
        -- a signature implies the document was opened, recorded or not
        first_opened_at is not null
            or count_views > 0
            or recipient_status in ('opened', 'signed')
            or signed_at is not null as is_opened,
        signed_at is not null or recipient_status = 'signed' as is_signed,
        coalesce(sign_mode = 'sequential', false) as is_sequential_flow

    from milestones

),

flow as (

    select
        *,
        case
            when is_sequential_flow then recipient_position + 1
            else 1
        end as flow_position,
        case
            when is_sequential_flow then lag(recipient_id) over (
                partition by workspace_id, shipment_id order by recipient_position
            )
        end as previous_recipient_id,
        case
            when is_sequential_flow then lag(sent_at) over (
                partition by workspace_id, shipment_id order by recipient_position
            )
        end as previous_sent_at,
        case
            when is_sequential_flow then lag(signed_at) over (
                partition by workspace_id, shipment_id order by recipient_position
            )
        end as previous_signed_at

    from stages

),

final as (

    select
        -- ids
        recipient_id,
        shipment_id,
        workspace_id,
        contact_id,
        document_id,
        previous_recipient_id,

        -- properties
        -- who: as staging holds them (hashed there under a privacy policy that hashes them)
        recipient_name,
        recipient_email,
        recipient_company,
        signature_level,
        sign_mode,
        recipient_position,
        flow_position,
        recipient_status,
        delivery_status,
        delivery_error,
        count_views,

        -- stages
        is_sent,
        is_delivered,
        is_delivery_failed,
        is_opened,
        is_signed,
        is_sequential_flow,
        -- still in the queue of a running sequential flow: the signer before has not signed
        coalesce(
            previous_recipient_id is not null
            and previous_signed_at is null
            and not is_sent
            and shipment_status = 'sent',
            false
        ) as is_waiting_for_previous_signer,

        -- timestamps
        sent_at,
        delivered_at,
        delivery_failed_at,
        first_opened_at,
        last_viewed_at,
        signed_at,
        expires_at,

        -- durations
        {{ hours_between('sent_at', 'first_opened_at') }} as hours_to_first_open,
        {{ hours_between('sent_at', 'signed_at') }} as hours_to_sign,
        {{ hours_between('first_opened_at', 'signed_at') }} as hours_from_open_to_sign,
        {{ hours_between('previous_sent_at', 'previous_signed_at') }}
            as hours_waiting_for_previous_signer,

        -- names
        document_name

    from flow

)

{{ select_with_workspace_name(
    'final', keys=['recipient_id', 'shipment_id', 'contact_id', 'document_id']
) }}
