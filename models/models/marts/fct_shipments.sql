-- One row per workspace and shipment whose history is complete and that the service has not
-- deleted: its milestones, the furthest funnel stage it reached, recipient counts and durations. Shipments whose audit trail or filled-in fields
-- are still loading (stg_signing__shipments `is_history_complete`) are held back until a
-- later load completes them; fct_signing_funnel counts them per week. Milestones come from the
-- audit trail where it has them, else from the shipment's and its recipients' own fields (see
-- the YAML for each column's source). Ids are unique only within a workspace: every join
-- carries `workspace_id`.

with

shipments as (

    select * from {{ ref('stg_signing__shipments') }}
    where is_history_complete
        and not is_deleted

),

recipients as (

    select * from {{ ref('fct_recipients') }}

),

shipment_events as (

    select * from {{ ref('int_shipment_events_pivoted') }}

),

workspaces as (

    select * from {{ ref('stg_signing__workspaces') }}

),

recipients_rolled_up as (

    select
        workspace_id,
        shipment_id,
        count(*) as count_recipients,
        sum(case when is_sent then 1 else 0 end) as count_recipients_sent,
        sum(case when is_delivered then 1 else 0 end) as count_recipients_delivered,
        sum(case when is_delivery_failed then 1 else 0 end) as count_recipients_failed,
        sum(case when is_opened then 1 else 0 end) as count_recipients_opened,
        sum(case when is_signed then 1 else 0 end) as count_recipients_signed,
        sum(count_views) as count_views,
        min(sent_at) as sent_at,
        min(first_opened_at) as first_recorded_open_at,
        -- an opened recipient without a recorded open opened at their sending or later
        min(case when is_opened and first_opened_at is null then sent_at end)
            as earliest_unrecorded_open_at,
        sum(
            case when is_opened and first_opened_at is null and sent_at is null then 1 else 0 end
        ) as count_unbounded_opens,
        min(signed_at) as first_signed_at,
        max(signed_at) as last_signed_at

    from recipients
    group by 1, 2

),

joined as (

    select
        shipments.*,
        workspaces.workspace_name,
        coalesce(recipients_rolled_up.count_recipients, 0) as count_recipients,
        coalesce(recipients_rolled_up.count_recipients_sent, 0) as count_recipients_sent,
        coalesce(recipients_rolled_up.count_recipients_delivered, 0)
            as count_recipients_delivered,
        coalesce(recipients_rolled_up.count_recipients_failed, 0) as count_recipients_failed,
        coalesce(recipients_rolled_up.count_recipients_opened, 0) as count_recipients_opened,
        coalesce(recipients_rolled_up.count_recipients_signed, 0) as count_recipients_signed,
        coalesce(recipients_rolled_up.count_views, 0) as count_views,
        recipients_rolled_up.sent_at,
        -- the earliest recorded open is the first one unless a recipient may have opened
        -- earlier without a record
        case
            when recipients_rolled_up.count_unbounded_opens = 0
                and (
                    recipients_rolled_up.earliest_unrecorded_open_at is null
                    or recipients_rolled_up.first_recorded_open_at
                        <= recipients_rolled_up.earliest_unrecorded_open_at
                )
                then recipients_rolled_up.first_recorded_open_at
        end as first_opened_at,
        recipients_rolled_up.first_signed_at,
        recipients_rolled_up.last_signed_at,
        coalesce(shipment_events.count_events, 0) as count_audit_events,
        shipment_events.completed_at as event_completed_at,
        shipment_events.expired_at as event_expired_at,
        shipment_events.revoked_at as event_revoked_at,
        coalesce(shipment_events.is_audit_trail_truncated, false) as is_audit_trail_truncated

    from shipments
    left join workspaces
        on shipments.workspace_id = workspaces.workspace_id
    left join recipients_rolled_up
        on shipments.workspace_id = recipients_rolled_up.workspace_id
        and shipments.shipment_id = recipients_rolled_up.shipment_id
    left join shipment_events
        on shipments.workspace_id = shipment_events.workspace_id
        and shipments.shipment_id = shipment_events.shipment_id

),

ends as (

    select
        *,
        coalesce(
            event_expired_at,
            case when shipment_status = 'expired' then expires_at end
        ) as expired_at,
        coalesce(event_revoked_at, revoked_at) as revoked_at_resolved

    from joined

),

milestones as (

    select
        *,
        coalesce(
            event_completed_at,
            -- every recipient signed: the last signature completes the shipment, unless it
            -- was revoked or expired before that signature (the service ended it there)
            case
                when count_recipients > 0
                    and count_recipients_signed = count_recipients
                    and not coalesce(revoked_at_resolved <= last_signed_at, false)
                    and not coalesce(expired_at <= last_signed_at, false)
                    then last_signed_at
            end
        ) as completed_at

    from ends

),

stages as (

    select
        *,
        count_recipients_sent > 0 as is_sent,
        count_recipients_opened > 0 as is_opened,
        count_recipients_signed > 0 as is_signed,
        completed_at is not null or shipment_status = 'completed' as is_completed,
        expired_at is not null or shipment_status = 'expired' as is_expired,
        revoked_at_resolved is not null or shipment_status = 'revoked' as is_revoked

    from milestones

),

final as (

    select
        -- ids
        shipment_id,
        workspace_id,
        document_id,
        folder_id,

        -- properties
        workspace_name,
        document_name,
        shipment_status,
        activity_status,
        channel,
        sign_mode,
        signature_level,
        owner_email,
        case
            when is_completed then 'completed'
            when is_signed then 'signed'
            when is_opened then 'opened'
            when is_sent then 'sent'
            else 'created'
        end as funnel_stage,
        case
            when is_completed then 4
            when is_signed then 3
            when is_opened then 2
            when is_sent then 1
            else 0
        end as funnel_stage_number,
        {{ week_start('sent_at') }} as sent_week,
        {{ week_start('completed_at') }} as completed_week,

        -- counts
        count_recipients,
        count_recipients_sent,
        count_recipients_delivered,
        count_recipients_failed,
        count_recipients_opened,
        count_recipients_signed,
        count_views,
        count_audit_events,

        -- booleans
        is_sent,
        is_opened,
        is_signed,
        is_completed,
        is_expired,
        is_revoked,
        is_archived,
        is_password_protected,
        count_audit_events > 0 as has_audit_trail,
        is_audit_trail_truncated,

        -- timestamps
        created_at,
        sent_at,
        first_opened_at,
        first_signed_at,
        completed_at,
        expired_at,
        revoked_at_resolved as revoked_at,
        expires_at,
        archived_at,

        -- durations
        {{ hours_between('sent_at', 'first_opened_at') }} as hours_to_first_open,
        {{ hours_between('sent_at', 'first_signed_at') }} as hours_to_first_signature,
        {{ hours_between('sent_at', 'completed_at') }} as hours_to_completion,

        -- keys across workspaces
        {{ workspace_key('shipment_id') }} as shipment_key,
        {{ workspace_key('document_id') }} as document_key

    from stages

)

select * from final
