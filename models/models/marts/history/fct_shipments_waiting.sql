-- One row per workspace, shipment waiting now and signer it waits on: who (name, e-mail,
-- company, as staging holds them), since when the document has been with them, and how long
-- that is at the workspace's `data_as_of` (dim_workspaces: the newest change loaded, so the
-- figure does not drift with the clock of whoever reads it). The `is_waiting` rows of
-- fct_signer_waits, with the shipment's document and expiry beside them.

with

waits as (

    select * from {{ ref('fct_signer_waits') }}
    where is_waiting

),

shipments as (

    select * from {{ ref('fct_shipments') }}

),

workspaces as (

    select workspace_id, data_as_of from {{ ref('dim_workspaces') }}

),

signers_per_shipment as (

    select
        workspace_id,
        shipment_id,
        count(*) as count_signers_waiting

    from waits
    group by 1, 2

),

final as (

    select
        -- ids
        waits.shipment_id,
        waits.recipient_id,
        waits.workspace_id,
        waits.document_id,
        waits.contact_id,

        -- properties
        waits.workspace_name,
        shipments.document_name,
        waits.recipient_name,
        waits.recipient_email,
        waits.recipient_company,
        waits.flow_position,
        shipments.sign_mode,
        signers_per_shipment.count_signers_waiting,

        -- booleans
        waits.is_opened,

        -- timestamps
        shipments.sent_at as shipment_sent_at,
        waits.waiting_since,
        shipments.expires_at,
        workspaces.data_as_of,

        -- durations
        case
            when workspaces.data_as_of >= waits.waiting_since
                then {{ hours_between('waits.waiting_since', 'workspaces.data_as_of') }}
        end as hours_waiting,

        -- keys across workspaces
        {{ workspace_key('waits.shipment_id', 'waits.workspace_id') }} as shipment_key,
        {{ workspace_key('waits.recipient_id', 'waits.workspace_id') }} as recipient_key

    from waits
    inner join shipments
        on waits.workspace_id = shipments.workspace_id
        and waits.shipment_id = shipments.shipment_id
    inner join signers_per_shipment
        on waits.workspace_id = signers_per_shipment.workspace_id
        and waits.shipment_id = signers_per_shipment.shipment_id
    left join workspaces
        on waits.workspace_id = workspaces.workspace_id

)

select * from final
