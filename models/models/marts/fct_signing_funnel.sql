-- One row per workspace, week of sending, document and signature level: how many shipments reached
-- each funnel stage (sent, opened, signed by someone, completed), how they ended, and the
-- conversion rate from each stage to the next. Only shipments that were sent count.
-- Shipments still loading (audit trail or fields pending after a stopped load) are held back
-- from every count but `count_shipments_held_back`, which places them in the week their
-- first recipient was sent the document (recipient field `sent_at`: their trail is pending).

with

shipments as (

    select * from {{ ref('fct_shipments') }}

),

staged_shipments as (

    select * from {{ ref('stg_signing__shipments') }}

),

staged_recipients as (

    select * from {{ ref('stg_signing__recipients') }}

),

sent_shipments as (

    select
        workspace_id,
        sent_week,
        document_id,
        signature_level,
        document_name,
        1 as is_counted,
        case when is_opened then 1 else 0 end as is_counted_opened,
        case when is_signed then 1 else 0 end as is_counted_signed,
        case when is_completed then 1 else 0 end as is_counted_completed,
        case when is_expired then 1 else 0 end as is_counted_expired,
        case when is_revoked then 1 else 0 end as is_counted_revoked,
        case
            when is_completed or is_expired or is_revoked then 0 else 1
        end as is_counted_in_progress,
        0 as is_held_back,
        count_recipients_sent,
        count_recipients_opened,
        count_recipients_signed

    from shipments
    where is_sent

),

held_back_first_sent as (

    select
        staged_shipments.shipment_id,
        staged_shipments.workspace_id,
        staged_shipments.document_id,
        staged_shipments.signature_level,
        staged_shipments.document_name,
        min(staged_recipients.sent_at) as sent_at

    from staged_shipments
    inner join staged_recipients
        on staged_shipments.workspace_id = staged_recipients.workspace_id
        and staged_shipments.shipment_id = staged_recipients.shipment_id
    where not staged_shipments.is_history_complete
        and not staged_shipments.is_deleted
    group by 1, 2, 3, 4, 5

),

held_back_shipments as (

    select
        workspace_id,
        {{ week_start('sent_at') }} as sent_week,
        document_id,
        signature_level,
        document_name,
        0 as is_counted,
        0 as is_counted_opened,
        0 as is_counted_signed,
        0 as is_counted_completed,
        0 as is_counted_expired,
        0 as is_counted_revoked,
        0 as is_counted_in_progress,
        1 as is_held_back,
        0 as count_recipients_sent,
        0 as count_recipients_opened,
        0 as count_recipients_signed

    from held_back_first_sent
    where sent_at is not null

),

funnel_shipments as (

    select * from sent_shipments
    union all
    select * from held_back_shipments

),

aggregated as (

    select
        workspace_id,
        sent_week,
        document_id,
        signature_level,
        max(document_name) as document_name,

        sum(is_counted) as count_shipments_sent,
        sum(is_counted_opened) as count_shipments_opened,
        sum(is_counted_signed) as count_shipments_signed,
        sum(is_counted_completed) as count_shipments_completed,
        sum(is_counted_expired) as count_shipments_expired,
        sum(is_counted_revoked) as count_shipments_revoked,
        sum(is_counted_in_progress) as count_shipments_in_progress,
        sum(is_held_back) as count_shipments_held_back,

        sum(count_recipients_sent) as count_recipients_sent,
        sum(count_recipients_opened) as count_recipients_opened,
        sum(count_recipients_signed) as count_recipients_signed

    from funnel_shipments
    group by 1, 2, 3, 4

),

final as (

    select
        {{ dbt.hash(dbt.concat([
            'workspace_id', "'|'",
            'cast(sent_week as ' ~ dbt.type_string() ~ ')', "'|'",
            'document_id', "'|'",
            "coalesce(signature_level, '')",
        ])) }} as funnel_id,
        workspace_id,
        sent_week,
        document_id,
        document_name,
        signature_level,

        count_shipments_sent,
        count_shipments_opened,
        count_shipments_signed,
        count_shipments_completed,
        count_shipments_expired,
        count_shipments_revoked,
        count_shipments_in_progress,
        count_shipments_held_back,
        count_recipients_sent,
        count_recipients_opened,
        count_recipients_signed,

        cast(count_shipments_opened as {{ dbt.type_float() }}) / nullif(count_shipments_sent, 0) as open_rate,
        cast(count_shipments_signed as {{ dbt.type_float() }}) / nullif(count_shipments_opened, 0) as signature_rate,
        cast(count_shipments_completed as {{ dbt.type_float() }}) / nullif(count_shipments_signed, 0)
            as completion_rate,
        cast(count_shipments_completed as {{ dbt.type_float() }}) / nullif(count_shipments_sent, 0)
            as overall_completion_rate,
        cast(count_recipients_signed as {{ dbt.type_float() }}) / nullif(count_recipients_sent, 0)
            as recipient_signature_rate

    from aggregated

)

{{ select_with_workspace_name('final', keys=['document_id']) }}
