-- The audit trail's shipment-level milestones: one row per workspace and shipment with any
-- audit event.
-- GET /shipments/{id}/events returns at most `audit_trail_cap` events (500), newest first, with
-- no paging: a trail that long may have lost its oldest events.

with

audit_events as (

    select * from {{ ref('stg_signing__audit_events') }}

),

pivoted as (

    select
        workspace_id,
        shipment_id,
        count(*) as count_events,
        min(case when event_type = 'completed' then occurred_at end) as completed_at,
        min(case when event_type = 'expired' then occurred_at end) as expired_at,
        min(case when event_type = 'revoked' then occurred_at end) as revoked_at,
        count(*) >= {{ var('audit_trail_cap') }} as is_audit_trail_truncated

    from audit_events
    group by 1, 2

)

select * from pivoted
