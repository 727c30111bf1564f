-- One row per workspace and week of completion (UTC Monday): the shipments completed that
-- week, whenever they were sent, and how long they took; fct_signing_funnel counts the same
-- completions by week of sending. Over fct_shipments (history complete, not deleted).

with

completed as (

    select * from {{ ref('fct_shipments') }}
    where is_completed
        and completed_week is not null

),

aggregated as (

    select
        workspace_id,
        completed_week,
        count(*) as count_shipments_completed,
        sum(count_recipients_signed) as count_signatures,
        min(sent_week) as first_sent_week,
        {{ median_and_p90('hours_to_completion', 'hours_to_complete') }}

    from completed
    group by 1, 2

),

final as (

    select
        {{ dbt.hash(dbt.concat([
            'workspace_id', "'|'", 'cast(completed_week as ' ~ dbt.type_string() ~ ')',
        ])) }} as completion_week_id,
        workspace_id,
        completed_week,
        count_shipments_completed,
        count_signatures,
        first_sent_week,
        median_hours_to_complete,
        p90_hours_to_complete

    from aggregated

)

{{ select_with_workspace_name('final') }}
