-- One row per workspace and contact the service has not deleted, with engagement: the shipments they received (a recipient
-- with their e-mail address was sent the document), opened and signed. Ids are unique only
-- within a workspace: every join carries `workspace_id`.

with

contacts as (

    select * from {{ ref('stg_signing__contacts') }}
    where not is_deleted

),

custom_properties as (

    select * from {{ ref('stg_signing__contact_custom_properties') }}

),

recipients as (

    select * from {{ ref('fct_recipients') }}

),

properties_rolled_up as (

    select
        workspace_id,
        contact_id,
        count(*) as count_custom_properties

    from custom_properties
    group by 1, 2

),

received as (

    select * from recipients
    where contact_id is not null
        and is_sent

),

engagement as (

    select
        workspace_id,
        contact_id,
        count(distinct shipment_id) as count_shipments_received,
        count(distinct case when is_opened then shipment_id end) as count_shipments_opened,
        count(distinct case when is_signed then shipment_id end) as count_shipments_signed,
        min(sent_at) as first_received_at,
        max(sent_at) as last_received_at,
        max(signed_at) as last_signed_at

    from received
    group by 1, 2

),

final as (

    select
        -- ids
        contacts.contact_id,
        contacts.workspace_id,

        -- properties
        contacts.contact_name,
        contacts.contact_email,
        contacts.contact_company,
        contacts.job_position,
        coalesce(properties_rolled_up.count_custom_properties, 0) as count_custom_properties,

        -- engagement
        coalesce(engagement.count_shipments_received, 0) as count_shipments_received,
        coalesce(engagement.count_shipments_opened, 0) as count_shipments_opened,
        coalesce(engagement.count_shipments_signed, 0) as count_shipments_signed,
        cast(engagement.count_shipments_signed as {{ dbt.type_float() }})
            / nullif(engagement.count_shipments_received, 0) as signature_rate,
        coalesce(engagement.count_shipments_received, 0) > 0 as is_recipient,

        -- timestamps
        contacts.created_at,
        contacts.updated_at,
        engagement.first_received_at,
        engagement.last_received_at,
        engagement.last_signed_at

    from contacts
    left join properties_rolled_up
        on contacts.workspace_id = properties_rolled_up.workspace_id
        and contacts.contact_id = properties_rolled_up.contact_id
    left join engagement
        on contacts.workspace_id = engagement.workspace_id
        and contacts.contact_id = engagement.contact_id

)

{{ select_with_workspace_name('final', keys=['contact_id']) }}
