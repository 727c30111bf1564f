-- The funnel neither fans out nor drops shipments: per stage, its counts add up to the
-- shipments of fct_shipments that reached that stage (every sent shipment is in one row),
-- and its held-back count to the sent shipments still loading.

with

funnel as (

    select
        sum(count_shipments_sent) as count_sent,
        sum(count_shipments_opened) as count_opened,
        sum(count_shipments_signed) as count_signed,
        sum(count_shipments_completed) as count_completed,
        sum(count_shipments_expired) as count_expired,
        sum(count_shipments_revoked) as count_revoked,
        sum(count_recipients_signed) as count_recipients_signed,
        sum(count_shipments_held_back) as count_held_back

    from {{ ref('fct_signing_funnel') }}

),

held_back as (

    select count(*) as count_held_back

    from {{ ref('stg_signing__shipments') }}
    where not is_history_complete
        and shipment_id in (
            select shipment_id from {{ ref('stg_signing__recipients') }}
            where sent_at is not null
        )

),

shipments as (

    select
        sum(case when is_sent then 1 else 0 end) as count_sent,
        sum(case when is_sent and is_opened then 1 else 0 end) as count_opened,
        sum(case when is_sent and is_signed then 1 else 0 end) as count_signed,
        sum(case when is_sent and is_completed then 1 else 0 end) as count_completed,
        sum(case when is_sent and is_expired then 1 else 0 end) as count_expired,
        sum(case when is_sent and is_revoked then 1 else 0 end) as count_revoked,
        sum(case when is_sent then count_recipients_signed else 0 end)
            as count_recipients_signed

    from {{ ref('fct_shipments') }}

),

final as (

    select
        funnel.*,
        shipments.count_sent as expected_sent

    from funnel
    cross join shipments
    cross join held_back
    where coalesce(funnel.count_sent, 0) <> coalesce(shipments.count_sent, 0)
        or coalesce(funnel.count_opened, 0) <> coalesce(shipments.count_opened, 0)
        or coalesce(funnel.count_signed, 0) <> coalesce(shipments.count_signed, 0)
        or coalesce(funnel.count_completed, 0) <> coalesce(shipments.count_completed, 0)
        or coalesce(funnel.count_expired, 0) <> coalesce(shipments.count_expired, 0)
        or coalesce(funnel.count_revoked, 0) <> coalesce(shipments.count_revoked, 0)
        or coalesce(funnel.count_recipients_signed, 0)
            <> coalesce(shipments.count_recipients_signed, 0)
        or coalesce(funnel.count_held_back, 0) <> held_back.count_held_back

)

select * from final
