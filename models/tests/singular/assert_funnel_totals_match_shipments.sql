-- The funnel neither fans out nor drops shipments, nor moves them between workspaces: per
-- workspace and stage, its counts add up to the shipments of fct_shipments that reached that
-- stage (every sent shipment is in one row), and its held-back count to the sent shipments
-- still loading.

with

funnel as (

    select
        workspace_id,
        sum(count_shipments_sent) as count_sent,
        sum(count_shipments_opened) as count_opened,
        sum(count_shipments_signed) as count_signed,
        sum(count_shipments_completed) as count_completed,
        sum(count_shipments_expired) as count_expired,
        sum(count_shipments_revoked) as count_revoked,
        sum(count_recipients_signed) as count_recipients_signed,
        sum(count_shipments_held_back) as count_held_back

    from {{ ref('fct_signing_funnel') }}
    group by 1

),

sent_recipients as (

    select distinct workspace_id, shipment_id
    from {{ ref('stg_signing__recipients') }}
    where sent_at is not null

),

held_back as (

    select
        staged_shipments.workspace_id,
        count(*) as count_held_back

    from {{ ref('stg_signing__shipments') }} as staged_shipments
    inner join sent_recipients
        on staged_shipments.workspace_id = sent_recipients.workspace_id
        and staged_shipments.shipment_id = sent_recipients.shipment_id
    where not staged_shipments.is_history_complete
        and not staged_shipments.is_deleted
    group by 1

),

shipments as (

    select
        workspace_id,
        sum(case when is_sent then 1 else 0 end) as count_sent,
        sum(case when is_sent and is_opened then 1 else 0 end) as count_opened,
        sum(case when is_sent and is_signed then 1 else 0 end) as count_signed,
        sum(case when is_sent and is_completed then 1 else 0 end) as count_completed,
        sum(case when is_sent and is_expired then 1 else 0 end) as count_expired,
        sum(case when is_sent and is_revoked then 1 else 0 end) as count_revoked,
        sum(case when is_sent then count_recipients_signed else 0 end)
            as count_recipients_signed

    from {{ ref('fct_shipments') }}
    group by 1

),

workspaces as (

    -- union all, then distinct: BigQuery takes no bare `union`
    select distinct workspace_id from (
        select workspace_id from funnel
        union all
        select workspace_id from held_back
        union all
        select workspace_id from shipments
    ) as every_workspace

),

final as (

    select
        workspaces.workspace_id,
        funnel.count_sent,
        funnel.count_opened,
        funnel.count_signed,
        funnel.count_completed,
        funnel.count_expired,
        funnel.count_revoked,
        funnel.count_recipients_signed,
        funnel.count_held_back,
        shipments.count_sent as expected_sent,
        held_back.count_held_back as expected_held_back

    from workspaces
    left join funnel
        on workspaces.workspace_id = funnel.workspace_id
    left join shipments
        on workspaces.workspace_id = shipments.workspace_id
    left join held_back
        on workspaces.workspace_id = held_back.workspace_id
    where coalesce(funnel.count_sent, 0) <> coalesce(shipments.count_sent, 0)
        or coalesce(funnel.count_opened, 0) <> coalesce(shipments.count_opened, 0)
        or coalesce(funnel.count_signed, 0) <> coalesce(shipments.count_signed, 0)
        or coalesce(funnel.count_completed, 0) <> coalesce(shipments.count_completed, 0)
        or coalesce(funnel.count_expired, 0) <> coalesce(shipments.count_expired, 0)
        or coalesce(funnel.count_revoked, 0) <> coalesce(shipments.count_revoked, 0)
        or coalesce(funnel.count_recipients_signed, 0)
            <> coalesce(shipments.count_recipients_signed, 0)
        or coalesce(funnel.count_held_back, 0) <> coalesce(held_back.count_held_back, 0)

)

select * from final
