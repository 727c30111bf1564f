-- A record the service deleted (raw `_deleted_at`, staging `is_deleted`) is in no mart: no
-- deleted shipment among the facts, its status intervals or its waits, no deleted contact
-- among the dimensions, and no recipient matched to a deleted contact. Deleted documents are
-- the exception: dim_documents keeps them, flagged, since live shipments still name them.

with

deleted_shipments as (

    select workspace_id, shipment_id from {{ ref('stg_signing__shipments') }}
    where is_deleted

),

deleted_contacts as (

    select workspace_id, contact_id from {{ ref('stg_signing__contacts') }}
    where is_deleted

),

shipment_rows as (

    select workspace_id, shipment_id, 'fct_shipments' as mart from {{ ref('fct_shipments') }}
    union all
    select workspace_id, shipment_id, 'fct_recipients' as mart from {{ ref('fct_recipients') }}
    union all
    select workspace_id, shipment_id, 'fct_shipment_status_intervals' as mart
    from {{ ref('fct_shipment_status_intervals') }}
    union all
    select workspace_id, shipment_id, 'fct_recipient_status_intervals' as mart
    from {{ ref('fct_recipient_status_intervals') }}
    union all
    select workspace_id, shipment_id, 'fct_signer_waits' as mart from {{ ref('fct_signer_waits') }}
    union all
    select workspace_id, shipment_id, 'dim_shipment_versions' as mart
    from {{ ref('dim_shipment_versions') }}

),

final as (

    select shipment_rows.workspace_id, shipment_rows.shipment_id as record_id, shipment_rows.mart
    from shipment_rows
    inner join deleted_shipments
        on shipment_rows.workspace_id = deleted_shipments.workspace_id
        and shipment_rows.shipment_id = deleted_shipments.shipment_id

    union all

    select contacts.workspace_id, contacts.contact_id as record_id, contacts.mart
    from (
        select workspace_id, contact_id, 'dim_contacts' as mart from {{ ref('dim_contacts') }}
        union all
        select workspace_id, contact_id, 'fct_recipients' as mart from {{ ref('fct_recipients') }}
        union all
        select workspace_id, contact_id, 'dim_contact_versions' as mart
        from {{ ref('dim_contact_versions') }}
    ) as contacts
    inner join deleted_contacts
        on contacts.workspace_id = deleted_contacts.workspace_id
        and contacts.contact_id = deleted_contacts.contact_id

)

select * from final
