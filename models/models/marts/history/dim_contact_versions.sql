-- One row per workspace, contact and version of its attributes as the loads observed them
-- (snapshot snp_signing__contacts): `observed_from` is when the load that brought the version was
-- stored (the pipeline's clock, not the service's), `observed_to` when the next one was, null for
-- the current version. A change that came and went between two model builds is not there; the
-- service's own times of status changes are in the status interval marts. Contacts the service
-- deleted are left out (their versions stay in the snapshot).

with

versions as (

    select * from {{ ref('snp_signing__contacts') }}

),

deleted as (

    -- records whose current version is deleted
    select workspace_id, contact_id from versions
    where dbt_valid_to is null and is_deleted

),

final as (

    select
        -- ids
        versions.dbt_scd_id as version_id,
        versions.contact_id,
        versions.workspace_id,

        -- properties
        row_number() over (
            partition by versions.workspace_id, versions.contact_id order by versions.dbt_valid_from
        ) as version_number,
        versions.contact_name,
        versions.contact_email,
        versions.contact_phone,
        versions.contact_company,
        versions.job_position,
        versions.notes,

        -- booleans
        versions.dbt_valid_to is null as is_current_version,

        -- timestamps
        versions.created_at,
        versions.updated_at,
        versions.dbt_valid_from as observed_from,
        versions.dbt_valid_to as observed_to

    from versions
    left join deleted
        on versions.workspace_id = deleted.workspace_id
        and versions.contact_id = deleted.contact_id
    where deleted.contact_id is null

)

{{ select_with_workspace_name('final', keys=['contact_id']) }}
