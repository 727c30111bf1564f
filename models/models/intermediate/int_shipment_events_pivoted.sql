-- The audit trail's shipment-level milestones: one row per shipment with any audit event.

with

audit_events as (

    select * from {{ ref('stg_signing__audit_events') }}

),

pivoted as (

    select
        shipment_id,
        count(*) as count_events,
        min(case when event_type = 'completed' then occurred_at end) as completed_at,
        min(case when event_type = 'expired' then occurred_at end) as expired_at,
        min(case when event_type = 'revoked' then occurred_at end) as revoked_at

    from audit_events
    group by 1

)

select * from pivoted
