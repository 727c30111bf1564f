-- One row per week of sending, document and signature level: how many shipments reached
-- each funnel stage (sent, opened, signed by someone, completed), how they ended, and the
-- conversion rate from each stage to the next. Only shipments that were sent count.

with

shipments as (

    select * from {{ ref('fct_shipments') }}

),

sent_shipments as (

    select * from shipments
    where is_sent

),

aggregated as (

    select
        workspace_id,
        sent_week,
        document_id,
        signature_level,
        max(document_name) as document_name,

        count(*) as count_shipments_sent,
        sum(case when is_opened then 1 else 0 end) as count_shipments_opened,
        sum(case when is_signed then 1 else 0 end) as count_shipments_signed,
        sum(case when is_completed then 1 else 0 end) as count_shipments_completed,
        sum(case when is_expired then 1 else 0 end) as count_shipments_expired,
        sum(case when is_revoked then 1 else 0 end) as count_shipments_revoked,
        sum(
            case when not (is_completed or is_expired or is_revoked) then 1 else 0 end
        ) as count_shipments_in_progress,

        sum(count_recipients_sent) as count_recipients_sent,
        sum(count_recipients_opened) as count_recipients_opened,
        sum(count_recipients_signed) as count_recipients_signed

    from sent_shipments
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
        count_recipients_sent,
        count_recipients_opened,
        count_recipients_signed,

        count_shipments_opened * 1.0 / nullif(count_shipments_sent, 0) as open_rate,
        count_shipments_signed * 1.0 / nullif(count_shipments_opened, 0) as signature_rate,
        count_shipments_completed * 1.0 / nullif(count_shipments_signed, 0)
            as completion_rate,
        count_shipments_completed * 1.0 / nullif(count_shipments_sent, 0)
            as overall_completion_rate,
        count_recipients_signed * 1.0 / nullif(count_recipients_sent, 0)
            as recipient_signature_rate

    from aggregated

)

select * from final
