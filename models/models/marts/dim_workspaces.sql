-- One row per workspace loaded into the warehouse (GET /me): its name, how recent its data is
-- and when it was last loaded, and its volume. `data_as_of` is the service's time of the
-- newest change loaded (a document or contact updated, an audit event), the same "as of" that
-- `signing-etl status` shows; `loaded_at` is when the workspace's last successful load ended
-- (its run record), on the loading machine's clock. Reports stamp their numbers with both.
-- `configured_name` is the name this warehouse's configuration gives the workspace (what
-- `--workspace` takes, `default` for a single key), beside the service's `workspace_name`.

with

workspaces as (

    select * from {{ ref('stg_signing__workspaces') }}

),

last_loads as (

    -- A load counts when it ran to its end, or stopped on purpose with rows loaded (as
    -- `signing-etl status` counts freshness).
    select
        workspace_id,
        max(finished_at) as loaded_at

    from {{ source('signing', '_signing_runs') }}
    where workspace_id is not null
        and (
            outcome = 'completed'
            or (outcome = 'stopped' and {{ adapter.quote('rows') }} <> '{}')
        )
    group by 1

),

configured_names as (

    -- The name its newest run was configured under (a renamed entry keeps its workspace).
    select workspace_id, configured_name
    from (
        select
            workspace_id,
            workspace_name as configured_name,
            row_number() over (
                partition by workspace_id order by started_at desc, run_id desc
            ) as newest
        from {{ source('signing', '_signing_runs') }}
        where workspace_id is not null
            and workspace_name is not null
    ) as runs
    where newest = 1

),

changes as (

    select workspace_id, updated_at as changed_at from {{ ref('stg_signing__documents') }}
    union all
    select workspace_id, updated_at as changed_at from {{ ref('stg_signing__contacts') }}
    union all
    select workspace_id, occurred_at as changed_at from {{ ref('stg_signing__audit_events') }}

),

newest_changes as (

    select
        workspace_id,
        max(changed_at) as data_as_of

    from changes
    group by 1

),

shipments as (

    select * from {{ ref('fct_shipments') }}

),

shipments_rolled_up as (

    select
        workspace_id,
        count(*) as count_shipments,
        sum(case when is_sent then 1 else 0 end) as count_shipments_sent,
        sum(case when is_completed then 1 else 0 end) as count_shipments_completed,
        min(sent_at) as first_sent_at,
        max(sent_at) as last_sent_at

    from shipments
    group by 1

),

waits as (

    select
        workspace_id,
        count(distinct shipment_id) as count_shipments_waiting,
        count(*) as count_signers_waiting

    from {{ ref('fct_signer_waits') }}
    where is_waiting
    group by 1

),

final as (

    select
        -- ids
        workspaces.workspace_id,

        -- properties
        workspaces.workspace_name,
        workspaces.workspace_slug,
        workspaces.plan,

        -- counts
        coalesce(shipments_rolled_up.count_shipments, 0) as count_shipments,
        coalesce(shipments_rolled_up.count_shipments_sent, 0) as count_shipments_sent,
        coalesce(shipments_rolled_up.count_shipments_completed, 0) as count_shipments_completed,
        coalesce(waits.count_shipments_waiting, 0) as count_shipments_waiting,
        coalesce(waits.count_signers_waiting, 0) as count_signers_waiting,

        -- timestamps
        newest_changes.data_as_of,
        last_loads.loaded_at,
        shipments_rolled_up.first_sent_at,
        shipments_rolled_up.last_sent_at,

        -- the configuration's name for it
        configured_names.configured_name

    from workspaces
    left join last_loads
        on workspaces.workspace_id = last_loads.workspace_id
    left join newest_changes
        on workspaces.workspace_id = newest_changes.workspace_id
    left join shipments_rolled_up
        on workspaces.workspace_id = shipments_rolled_up.workspace_id
    left join waits
        on workspaces.workspace_id = waits.workspace_id
    left join configured_names
        on workspaces.workspace_id = configured_names.workspace_id

)

select * from final
