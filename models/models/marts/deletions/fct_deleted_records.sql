-- One row per workspace and record (document, shipment, contact) the service deleted, as the
-- pipeline marked it (raw `_deleted_at`; none under `deletes = hard`, which removes the rows):
-- when the pipeline noticed and the last time it had seen the record alive. The service stamps
-- no deletion, so the deletion happened between the two: `last_seen_alive_at` is the later of
-- the load that last wrote the record and the start of the last run that checked the record's
-- list (a count or a full pass) and ended before the deletion was noticed. Both on the
-- pipeline's clock. Ids are unique only within a workspace: use `record_key`.

with

documents as (

    select
        workspace_id,
        'document' as record_kind,
        'documents' as list_name,
        document_id as record_id,
        document_name as record_name,
        deleted_at,
        loaded_at

    from {{ ref('stg_signing__documents') }}
    where is_deleted

),

shipments as (

    select
        workspace_id,
        'shipment' as record_kind,
        'shipments' as list_name,
        shipment_id as record_id,
        document_name as record_name,
        deleted_at,
        loaded_at

    from {{ ref('stg_signing__shipments') }}
    where is_deleted

),

contacts as (

    select
        workspace_id,
        'contact' as record_kind,
        'contacts' as list_name,
        contact_id as record_id,
        contact_name as record_name,
        deleted_at,
        loaded_at

    from {{ ref('stg_signing__contacts') }}
    where is_deleted

),

deleted as (

    select * from documents
    union all
    select * from shipments
    union all
    select * from contacts

),

runs as (

    select workspace_id, started_at, finished_at, deletions
    from {{ source('signing', '_signing_runs') }}
    where workspace_id is not null
        and finished_at is not null

),

-- Each run's check of each list (`deletions`: JSON by list, `check` count, full, incomplete
-- or none): a count or full check that ended before the deletion was noticed saw it alive.
list_checks as (

    {% for list_name in ['documents', 'shipments', 'contacts'] %}
    select
        workspace_id,
        '{{ list_name }}' as list_name,
        started_at,
        finished_at,
        {{ json_text(json_fragment('deletions', list_name), 'check') }} as check_kind
    from runs
    {% if not loop.last %}union all{% endif %}
    {% endfor %}

),

checked_alive as (

    select
        deleted.workspace_id,
        deleted.list_name,
        deleted.record_id,
        max(list_checks.started_at) as last_checked_at

    from deleted
    inner join list_checks
        on deleted.workspace_id = list_checks.workspace_id
        and deleted.list_name = list_checks.list_name
        and list_checks.finished_at < deleted.deleted_at
        and list_checks.check_kind in ('count', 'full')
    group by 1, 2, 3

),

final as (

    select
        -- ids
        deleted.record_id,
        deleted.workspace_id,

        -- properties
        deleted.record_kind,
        deleted.record_name,

        -- timestamps
        deleted.deleted_at as noticed_at,
        {{ day_start('deleted.deleted_at') }} as noticed_day,
        case
            when checked_alive.last_checked_at > deleted.loaded_at
                or deleted.loaded_at is null
                then checked_alive.last_checked_at
            else deleted.loaded_at
        end as last_seen_alive_at,
        deleted.loaded_at as last_loaded_at,

        -- keys across workspaces
        {{ workspace_key(
            dbt.concat(['deleted.record_kind', "':'", 'deleted.record_id']),
            'deleted.workspace_id',
        ) }} as record_key

    from deleted
    left join checked_alive
        on deleted.workspace_id = checked_alive.workspace_id
        and deleted.list_name = checked_alive.list_name
        and deleted.record_id = checked_alive.record_id

)

{{ select_with_workspace_name('final') }}
