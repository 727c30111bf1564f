-- One row per workspace, shipment and version of its attributes as the loads observed them
-- (snapshot snp_signing__shipments): `observed_from` is when the load that brought the version was
-- stored (the pipeline's clock, not the service's), `observed_to` when the next one was, null for
-- the current version. A change that came and went between two model builds is not there; the
-- service's own times of status changes are in the status interval marts. Shipments the service
-- deleted are left out (their versions stay in the snapshot).

with

versions as (

    select * from {{ ref('snp_signing__shipments') }}

),

deleted as (

    -- records whose current version is deleted
    select workspace_id, shipment_id from versions
    where dbt_valid_to is null and is_deleted

),

final as (

    select
        -- ids
        versions.dbt_scd_id as version_id,
        versions.shipment_id,
        versions.workspace_id,
        versions.document_id,

        -- properties
        row_number() over (
            partition by versions.workspace_id, versions.shipment_id order by versions.dbt_valid_from
        ) as version_number,
        versions.document_name,
        versions.folder_id,
        versions.shipment_status,
        versions.activity_status,
        versions.channel,
        versions.sign_mode,
        versions.signature_level,
        versions.owner_name,
        versions.owner_email,
        versions.is_password_protected,
        versions.is_final_pdf_ready,
        versions.is_sealed,

        -- booleans
        versions.dbt_valid_to is null as is_current_version,

        -- timestamps
        versions.created_at,
        versions.expires_at,
        versions.archived_at,
        versions.revoked_at,
        versions.dbt_valid_from as observed_from,
        versions.dbt_valid_to as observed_to

    from versions
    left join deleted
        on versions.workspace_id = deleted.workspace_id
        and versions.shipment_id = deleted.shipment_id
    where deleted.shipment_id is null

)

{{ select_with_workspace_name('final', keys=['shipment_id', 'document_id']) }}
