-- One row per workspace, shipment and status it held, with the service's own times: `sent`
-- (in progress) from its creation, then `completed`, `expired` or `revoked` from the event
-- that ended it (fct_shipments' milestones: the audit trail's event, else the shipment's own
-- fields). Over the shipments of fct_shipments: history complete, not deleted. Ids are unique
-- only within a workspace: every join and window carries `workspace_id`.

with

shipments as (

    select * from {{ ref('fct_shipments') }}

),

endings as (

    select workspace_id, shipment_id, 'completed' as shipment_status, completed_at as ended_at
    from shipments
    where completed_at is not null

    union all

    select workspace_id, shipment_id, 'expired' as shipment_status, expired_at as ended_at
    from shipments
    where expired_at is not null

    union all

    select workspace_id, shipment_id, 'revoked' as shipment_status, revoked_at as ended_at
    from shipments
    where revoked_at is not null

),

first_endings as (

    select
        workspace_id,
        shipment_id,
        shipment_status,
        ended_at,
        row_number() over (
            partition by workspace_id, shipment_id order by ended_at, shipment_status
        ) as ending_rank

    from endings

),

intervals as (

    select
        shipments.workspace_id,
        shipments.shipment_id,
        'sent' as shipment_status,
        1 as interval_number,
        shipments.created_at as valid_from,
        first_endings.ended_at as valid_to,
        shipments.is_audit_trail_truncated

    from shipments
    left join first_endings
        on shipments.workspace_id = first_endings.workspace_id
        and shipments.shipment_id = first_endings.shipment_id
        and first_endings.ending_rank = 1

    union all

    select
        shipments.workspace_id,
        shipments.shipment_id,
        first_endings.shipment_status,
        2 as interval_number,
        first_endings.ended_at as valid_from,
        cast(null as {{ type_timestamp_tz() }}) as valid_to,
        shipments.is_audit_trail_truncated

    from shipments
    inner join first_endings
        on shipments.workspace_id = first_endings.workspace_id
        and shipments.shipment_id = first_endings.shipment_id
        and first_endings.ending_rank = 1

),

final as (

    select
        -- ids
        {{ dbt.hash(dbt.concat([
            'workspace_id', "'|'", 'shipment_id', "'|'",
            'cast(interval_number as ' ~ dbt.type_string() ~ ')',
        ])) }} as status_interval_id,
        shipment_id,
        workspace_id,

        -- properties
        shipment_status,
        interval_number,

        -- booleans
        valid_to is null as is_current,
        is_audit_trail_truncated,

        -- timestamps
        valid_from,
        valid_to,

        -- durations
        {{ hours_between('valid_from', 'valid_to') }} as hours_in_status

    from intervals

),

-- the document's name beside each interval, so a report needs no join for it
named as (

    select
        final.*,
        shipments.document_name

    from final
    inner join shipments
        on final.workspace_id = shipments.workspace_id
        and final.shipment_id = shipments.shipment_id

)

{{ select_with_workspace_name('named', keys=['shipment_id']) }}
