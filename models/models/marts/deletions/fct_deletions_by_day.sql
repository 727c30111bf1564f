-- One row per workspace, day (UTC) and kind of record with deletions the pipeline noticed that
-- day: how many documents, shipments or contacts the service deleted, as fct_deleted_records
-- lists them. The day is when the pipeline noticed (the service stamps no deletion); a week
-- is `noticed_week` (UTC Monday).

with

deleted as (

    select * from {{ ref('fct_deleted_records') }}

),

aggregated as (

    select
        workspace_id,
        noticed_day,
        record_kind,
        count(*) as count_deleted,
        max(noticed_at) as last_noticed_at

    from deleted
    group by 1, 2, 3

),

final as (

    select
        {{ dbt.hash(dbt.concat([
            'workspace_id', "'|'",
            'cast(noticed_day as ' ~ dbt.type_string() ~ ')', "'|'",
            'record_kind',
        ])) }} as deletion_day_id,
        workspace_id,
        noticed_day,
        {{ week_start('last_noticed_at') }} as noticed_week,
        record_kind,
        count_deleted,
        last_noticed_at

    from aggregated

)

{{ select_with_workspace_name('final') }}
