-- One row per workspace and document (template) loaded or named by a loaded shipment: its
-- properties, its fields, and how its shipments did. A document the service deleted stays,
-- flagged (`is_deleted`, `deleted_at`): its live shipments still name it, and a join from them
-- must not lose them. So does one whose record was never loaded (deleted before the
-- warehouse's first load, or not loaded yet), which only its shipments name (`is_loaded`
-- false): its name is theirs, its other properties unknown (`is_deleted` too). Ids are
-- unique only within a workspace: every join carries `workspace_id` (or use `document_key`).

with

loaded_documents as (

    select
        *,
        true as is_loaded

    from {{ ref('stg_signing__documents') }}

),

named_by_shipments as (

    -- the documents shipments name, each with the name its most recent shipment gave it
    select
        workspace_id,
        document_id,
        document_name,
        row_number() over (
            partition by workspace_id, document_id
            order by created_at desc, shipment_id desc
        ) as recency

    from {{ ref('stg_signing__shipments') }}
    where document_id is not null

),

named_only as (

    select
        named.document_id,
        named.workspace_id,
        cast(null as {{ dbt.type_string() }}) as folder_id,
        cast(null as {{ dbt.type_string() }}) as theme_id,
        named.document_name,
        cast(null as {{ dbt.type_string() }}) as document_kind,
        cast(null as {{ dbt.type_string() }}) as language,
        cast(null as {{ dbt.type_string() }}) as document_status,
        cast(null as {{ dbt.type_int() }}) as signer_count,
        cast(null as {{ dbt.type_boolean() }}) as is_password_protected,
        cast(null as {{ type_timestamp_tz() }}) as created_at,
        cast(null as {{ type_timestamp_tz() }}) as updated_at,
        -- unknown: deleted before the first load, or its record not loaded yet (a stopped
        -- load, `--resources shipments`)
        cast(null as {{ dbt.type_boolean() }}) as is_deleted,
        cast(null as {{ type_timestamp_tz() }}) as deleted_at,
        false as is_loaded

    from named_by_shipments as named
    where named.recency = 1
        and not exists (
            select 1
            from loaded_documents
            where loaded_documents.workspace_id = named.workspace_id
                and loaded_documents.document_id = named.document_id
        )

),

documents as (

    select
        document_id, workspace_id, folder_id, theme_id, document_name, document_kind, language,
        document_status, signer_count, is_password_protected, created_at, updated_at,
        is_deleted, deleted_at, is_loaded
    from loaded_documents

    union all

    select
        document_id, workspace_id, folder_id, theme_id, document_name, document_kind, language,
        document_status, signer_count, is_password_protected, created_at, updated_at,
        is_deleted, deleted_at, is_loaded
    from named_only

),

deleted_shipments as (

    select
        workspace_id,
        document_id,
        count(*) as count_shipments_deleted

    from {{ ref('stg_signing__shipments') }}
    where is_deleted
    group by 1, 2

),

document_fields as (

    select * from {{ ref('stg_signing__document_fields') }}

),

shipments as (

    select * from {{ ref('fct_shipments') }}

),

fields_rolled_up as (

    select
        workspace_id,
        document_id,
        count(*) as count_fields,
        sum(case when is_required then 1 else 0 end) as count_required_fields,
        sum(case when field_type = 'payment' then 1 else 0 end) as count_payment_fields

    from document_fields
    group by 1, 2

),

shipments_rolled_up as (

    select
        workspace_id,
        document_id,
        count(*) as count_shipments,
        sum(case when is_sent then 1 else 0 end) as count_shipments_sent,
        sum(case when is_opened then 1 else 0 end) as count_shipments_opened,
        sum(case when is_signed then 1 else 0 end) as count_shipments_signed,
        sum(case when is_completed then 1 else 0 end) as count_shipments_completed,
        sum(case when is_expired then 1 else 0 end) as count_shipments_expired,
        sum(case when is_revoked then 1 else 0 end) as count_shipments_revoked,
        sum(count_recipients_signed) as count_signatures,
        min(sent_at) as first_sent_at,
        max(sent_at) as last_sent_at

    from shipments
    group by 1, 2

),

final as (

    select
        -- ids
        documents.document_id,
        documents.workspace_id,
        documents.folder_id,
        documents.theme_id,

        -- properties
        documents.document_name,
        documents.document_kind,
        documents.language,
        documents.document_status,
        documents.signer_count,
        documents.is_password_protected,
        coalesce(fields_rolled_up.count_fields, 0) as count_fields,
        coalesce(fields_rolled_up.count_required_fields, 0) as count_required_fields,
        coalesce(fields_rolled_up.count_payment_fields, 0) > 0 as has_payment_field,

        -- usage
        coalesce(shipments_rolled_up.count_shipments, 0) as count_shipments,
        coalesce(shipments_rolled_up.count_shipments_sent, 0) as count_shipments_sent,
        coalesce(shipments_rolled_up.count_shipments_opened, 0) as count_shipments_opened,
        coalesce(shipments_rolled_up.count_shipments_signed, 0) as count_shipments_signed,
        coalesce(shipments_rolled_up.count_shipments_completed, 0)
            as count_shipments_completed,
        coalesce(shipments_rolled_up.count_shipments_expired, 0) as count_shipments_expired,
        coalesce(shipments_rolled_up.count_shipments_revoked, 0) as count_shipments_revoked,
        coalesce(shipments_rolled_up.count_signatures, 0) as count_signatures,
        coalesce(deleted_shipments.count_shipments_deleted, 0) as count_shipments_deleted,
        cast(shipments_rolled_up.count_shipments_completed as {{ dbt.type_float() }})
            / nullif(shipments_rolled_up.count_shipments_sent, 0) as completion_rate,

        -- timestamps
        documents.created_at,
        documents.updated_at,
        shipments_rolled_up.first_sent_at,
        shipments_rolled_up.last_sent_at,

        -- deleted by the service (when the pipeline noticed): kept so that joins keep rows
        documents.is_deleted,
        documents.deleted_at,
        documents.is_loaded

    from documents
    left join fields_rolled_up
        on documents.workspace_id = fields_rolled_up.workspace_id
        and documents.document_id = fields_rolled_up.document_id
    left join shipments_rolled_up
        on documents.workspace_id = shipments_rolled_up.workspace_id
        and documents.document_id = shipments_rolled_up.document_id
    left join deleted_shipments
        on documents.workspace_id = deleted_shipments.workspace_id
        and documents.document_id = deleted_shipments.document_id

)

{{ select_with_workspace_name('final', keys=['document_id']) }}
