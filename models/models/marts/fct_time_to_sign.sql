-- How long signing takes, as median and 90th percentile, per workspace: one row per document
-- (all weeks) and one row per week of sending (all documents); `time_grain` says which.
-- Hours to sign are each signer's own, from the document reaching them to their signature
-- (later signers of a sequential flow are not charged for the wait before them); hours to
-- complete are per shipment, from sending to the last signature.
-- percentile_cont ... within group (macro median_and_p90) is standard SQL (DuckDB, Postgres,
-- Snowflake, Redshift); BigQuery's version of that one macro uses approx_quantiles.

with

recipients as (

    select * from {{ ref('fct_recipients') }}

),

shipments as (

    select * from {{ ref('fct_shipments') }}

),

signers as (

    select
        recipients.workspace_id,
        recipients.document_id,
        shipments.sent_week,
        recipients.hours_to_sign

    from recipients
    inner join shipments
        on recipients.workspace_id = shipments.workspace_id
        and recipients.shipment_id = shipments.shipment_id
    where recipients.is_signed
        and recipients.hours_to_sign is not null

),

completions as (

    select
        workspace_id,
        document_id,
        sent_week,
        hours_to_completion

    from shipments
    where is_completed
        and hours_to_completion is not null

),

sent_shipments as (

    select
        workspace_id,
        document_id,
        max(document_name) as document_name,
        sent_week,
        count(*) as count_shipments_sent

    from shipments
    where is_sent
    group by 1, 2, 4

),

documents_sent as (

    select
        workspace_id,
        document_id,
        max(document_name) as document_name,
        sum(count_shipments_sent) as count_shipments_sent

    from sent_shipments
    group by 1, 2

),

weeks_sent as (

    select
        workspace_id,
        sent_week,
        sum(count_shipments_sent) as count_shipments_sent

    from sent_shipments
    group by 1, 2

),

signatures_by_document as (

    select
        workspace_id,
        document_id,
        count(*) as count_signatures,
        {{ median_and_p90('hours_to_sign', 'hours_to_sign') }}

    from signers
    group by 1, 2

),

completions_by_document as (

    select
        workspace_id,
        document_id,
        count(*) as count_shipments_completed,
        {{ median_and_p90('hours_to_completion', 'hours_to_complete') }}

    from completions
    group by 1, 2

),

signatures_by_week as (

    select
        workspace_id,
        sent_week,
        count(*) as count_signatures,
        {{ median_and_p90('hours_to_sign', 'hours_to_sign') }}

    from signers
    group by 1, 2

),

completions_by_week as (

    select
        workspace_id,
        sent_week,
        count(*) as count_shipments_completed,
        {{ median_and_p90('hours_to_completion', 'hours_to_complete') }}

    from completions
    group by 1, 2

),

per_document as (

    select
        'document' as time_grain,
        documents_sent.workspace_id,
        documents_sent.document_id,
        documents_sent.document_name,
        cast(null as date) as sent_week,
        documents_sent.count_shipments_sent,
        coalesce(signatures_by_document.count_signatures, 0) as count_signatures,
        signatures_by_document.median_hours_to_sign,
        signatures_by_document.p90_hours_to_sign,
        coalesce(completions_by_document.count_shipments_completed, 0)
            as count_shipments_completed,
        completions_by_document.median_hours_to_complete,
        completions_by_document.p90_hours_to_complete

    from documents_sent
    left join signatures_by_document
        on documents_sent.workspace_id = signatures_by_document.workspace_id
        and documents_sent.document_id = signatures_by_document.document_id
    left join completions_by_document
        on documents_sent.workspace_id = completions_by_document.workspace_id
        and documents_sent.document_id = completions_by_document.document_id

),

per_week as (

    select
        'week' as time_grain,
        weeks_sent.workspace_id,
        cast(null as {{ dbt.type_string() }}) as document_id,
        cast(null as {{ dbt.type_string() }}) as document_name,
        weeks_sent.sent_week,
        weeks_sent.count_shipments_sent,
        coalesce(signatures_by_week.count_signatures, 0) as count_signatures,
        signatures_by_week.median_hours_to_sign,
        signatures_by_week.p90_hours_to_sign,
        coalesce(completions_by_week.count_shipments_completed, 0)
            as count_shipments_completed,
        completions_by_week.median_hours_to_complete,
        completions_by_week.p90_hours_to_complete

    from weeks_sent
    left join signatures_by_week
        on weeks_sent.workspace_id = signatures_by_week.workspace_id
        and weeks_sent.sent_week = signatures_by_week.sent_week
    left join completions_by_week
        on weeks_sent.workspace_id = completions_by_week.workspace_id
        and weeks_sent.sent_week = completions_by_week.sent_week

),

unioned as (

    select * from per_document
    union all
    select * from per_week

),

final as (

    select
        {{ dbt.hash(dbt.concat([
            'time_grain', "'|'",
            'workspace_id', "'|'",
            "coalesce(document_id, '')", "'|'",
            "coalesce(cast(sent_week as " ~ dbt.type_string() ~ "), '')",
        ])) }} as time_to_sign_id,
        *

    from unioned

)

{{ select_with_workspace_name('final', keys=['document_id']) }}
