-- Each of fct_time_to_sign's two grains counts every sent shipment exactly once, in its own
-- workspace.

with

time_to_sign as (

    select
        workspace_id,
        time_grain,
        sum(count_shipments_sent) as count_sent,
        sum(count_shipments_completed) as count_completed

    from {{ ref('fct_time_to_sign') }}
    group by 1, 2

),

shipments as (

    select
        workspace_id,
        sum(case when is_sent then 1 else 0 end) as count_sent,
        sum(case when is_sent and is_completed then 1 else 0 end) as count_completed

    from {{ ref('fct_shipments') }}
    group by 1

),

grains as (

    select 'document' as time_grain
    union all
    select 'week' as time_grain

),

workspaces as (

    -- union all, then distinct: BigQuery takes no bare `union`
    select distinct workspace_id from (
        select workspace_id from time_to_sign
        union all
        select workspace_id from shipments
    ) as every_workspace

),

final as (

    select
        workspaces.workspace_id,
        grains.time_grain,
        time_to_sign.count_sent,
        shipments.count_sent as expected_sent

    from workspaces
    cross join grains
    left join shipments
        on workspaces.workspace_id = shipments.workspace_id
    left join time_to_sign
        on workspaces.workspace_id = time_to_sign.workspace_id
        and grains.time_grain = time_to_sign.time_grain
    where coalesce(time_to_sign.count_sent, 0) <> coalesce(shipments.count_sent, 0)
        or coalesce(time_to_sign.count_completed, 0) <> coalesce(shipments.count_completed, 0)

)

select * from final
