-- One row per workspace, recipient and status they held, with the service's own times:
-- `pending` from the shipment's creation, `sent` from when the document was sent to them,
-- `opened` from their first open, `signed` from their signature (fct_recipients' milestones:
-- the audit trail's events, else the recipient's own fields). A status with no known time
-- has no interval. Over the recipients of fct_recipients: history complete, not deleted.
-- Ids are unique only within a workspace: every join and window carries `workspace_id`.

with

recipients as (

    select * from {{ ref('fct_recipients') }}

),

shipments as (

    select workspace_id, shipment_id, created_at, is_audit_trail_truncated
    from {{ ref('fct_shipments') }}

),

placed as (

    select
        recipients.workspace_id,
        recipients.shipment_id,
        recipients.recipient_id,
        recipients.sent_at,
        recipients.first_opened_at,
        recipients.signed_at,
        shipments.created_at,
        shipments.is_audit_trail_truncated

    from recipients
    inner join shipments
        on recipients.workspace_id = shipments.workspace_id
        and recipients.shipment_id = shipments.shipment_id

),

changes as (

    select workspace_id, shipment_id, recipient_id, is_audit_trail_truncated,
        'pending' as recipient_status, 0 as status_rank, created_at as changed_at
    from placed

    union all

    select workspace_id, shipment_id, recipient_id, is_audit_trail_truncated,
        'sent' as recipient_status, 1 as status_rank, sent_at as changed_at
    from placed
    where sent_at is not null

    union all

    select workspace_id, shipment_id, recipient_id, is_audit_trail_truncated,
        'opened' as recipient_status, 2 as status_rank, first_opened_at as changed_at
    from placed
    where first_opened_at is not null

    union all

    select workspace_id, shipment_id, recipient_id, is_audit_trail_truncated,
        'signed' as recipient_status, 3 as status_rank, signed_at as changed_at
    from placed
    where signed_at is not null

),

intervals as (

    select
        *,
        row_number() over (
            partition by workspace_id, recipient_id order by changed_at, status_rank
        ) as interval_number,
        lead(changed_at) over (
            partition by workspace_id, recipient_id order by changed_at, status_rank
        ) as valid_to

    from changes

),

final as (

    select
        -- ids
        {{ dbt.hash(dbt.concat([
            'workspace_id', "'|'", 'recipient_id', "'|'",
            'cast(interval_number as ' ~ dbt.type_string() ~ ')',
        ])) }} as status_interval_id,
        recipient_id,
        shipment_id,
        workspace_id,

        -- properties
        recipient_status,
        interval_number,

        -- booleans
        valid_to is null as is_current,
        is_audit_trail_truncated,

        -- timestamps
        changed_at as valid_from,
        valid_to,

        -- durations
        {{ hours_between('changed_at', 'valid_to') }} as hours_in_status

    from intervals

),

-- the recipient's and the document's names beside each interval, so a report needs no join
named as (

    select
        final.*,
        recipients.recipient_name,
        recipients.document_name

    from final
    inner join recipients
        on final.workspace_id = recipients.workspace_id
        and final.recipient_id = recipients.recipient_id

)

{{ select_with_workspace_name('named', keys=['recipient_id', 'shipment_id']) }}
