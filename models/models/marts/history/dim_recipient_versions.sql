-- One row per workspace, recipient and version of its attributes as the loads observed them
-- (snapshot snp_signing__recipients): `observed_from` is when the load that brought the version
-- was stored (the pipeline's clock, not the service's), `observed_to` when the next one was, null
-- for the current version. A change that came and went between two model builds is not there; the
-- service's own times of status changes are in the status interval marts. Recipients of shipments
-- the service deleted are left out (their versions stay in the snapshot).

with

versions as (

    select * from {{ ref('snp_signing__recipients') }}

),

deleted as (

    -- recipients whose current version is deleted, or whose shipment's current version is
    select distinct workspace_id, recipient_id from (
        select workspace_id, recipient_id from versions
        where dbt_valid_to is null and is_deleted

        union all

        select versions.workspace_id, versions.recipient_id
        from versions
        inner join {{ ref('snp_signing__shipments') }} as shipments
            on versions.workspace_id = shipments.workspace_id
            and versions.shipment_id = shipments.shipment_id
        where shipments.dbt_valid_to is null and shipments.is_deleted
    ) as every_deleted

),

final as (

    select
        -- ids
        versions.dbt_scd_id as version_id,
        versions.recipient_id,
        versions.workspace_id,
        versions.shipment_id,

        -- properties
        row_number() over (
            partition by versions.workspace_id, versions.recipient_id order by versions.dbt_valid_from
        ) as version_number,
        versions.recipient_position,
        versions.recipient_name,
        versions.recipient_email,
        versions.recipient_phone,
        versions.recipient_company,
        versions.recipient_status,
        versions.delivery_status,
        versions.delivery_error,
        versions.count_views,

        -- booleans
        versions.dbt_valid_to is null as is_current_version,

        -- timestamps
        versions.sent_at,
        versions.expires_at,
        versions.signed_at,
        versions.last_viewed_at,
        versions.dbt_valid_from as observed_from,
        versions.dbt_valid_to as observed_to

    from versions
    left join deleted
        on versions.workspace_id = deleted.workspace_id
        and versions.recipient_id = deleted.recipient_id
    where deleted.recipient_id is null

)

{{ select_with_workspace_name('final', keys=['recipient_id', 'shipment_id']) }}
