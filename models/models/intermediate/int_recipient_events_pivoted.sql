-- The audit trail's milestones of each recipient: one row per workspace and recipient with
-- events (ids are unique only within a workspace).
-- Only recipient-level event types count here; shipment-level ones (completed, expired,
-- revoked) name the first recipient but belong to the shipment.
-- `is_audit_trail_truncated`: the shipment's loaded trail reached the API's cap
-- (`audit_trail_cap`, 500 newest events), so its oldest events may be missing; fct_recipients
-- decides which of the times below it still trusts then.

with

audit_events as (

    select
        *,
        count(*) over (partition by workspace_id, shipment_id) as count_shipment_events

    from {{ ref('stg_signing__audit_events') }}

),

pivoted as (

    select
        workspace_id,
        recipient_id,
        shipment_id,
        min(case when event_type = 'sent' then occurred_at end) as sent_at,
        min(case when event_type = 'delivered' then occurred_at end) as delivered_at,
        min(case when event_type = 'delivery_failed' then occurred_at end)
            as delivery_failed_at,
        min(case when event_type = 'opened' then occurred_at end) as first_opened_at,
        max(case when event_type = 'opened' then occurred_at end) as last_opened_at,
        min(case when event_type = 'signed' then occurred_at end) as signed_at,
        sum(case when event_type = 'opened' then 1 else 0 end) as count_opened_events,
        max(count_shipment_events) >= {{ var('audit_trail_cap') }} as is_audit_trail_truncated

    from audit_events
    where event_type in ('sent', 'delivered', 'delivery_failed', 'opened', 'signed')
        and recipient_id is not null
    group by 1, 2, 3

)

select * from pivoted
