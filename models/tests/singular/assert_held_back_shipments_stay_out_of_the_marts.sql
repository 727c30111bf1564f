-- A shipment whose children are still loading (stg_signing__shipments `is_history_complete`
-- false) has no row in the facts, so no mart counts it with half its history; every other
-- shipment the service has not deleted has its row (deleted ones: see
-- assert_deleted_records_stay_out_of_the_marts).

with

shipments as (

    select * from {{ ref('stg_signing__shipments') }}
    where not is_deleted

),

fact_shipments as (

    select workspace_id, shipment_id from {{ ref('fct_shipments') }}

),

fact_recipients as (

    select distinct workspace_id, shipment_id from {{ ref('fct_recipients') }}

),

final as (

    select
        shipments.workspace_id,
        shipments.shipment_id,
        shipments.is_history_complete,
        case
            when shipments.is_history_complete then 'complete shipment missing'
            else 'held-back shipment in fct_shipments'
        end as problem

    from shipments
    left join fact_shipments
        on shipments.workspace_id = fact_shipments.workspace_id
        and shipments.shipment_id = fact_shipments.shipment_id
    where shipments.is_history_complete <> (fact_shipments.shipment_id is not null)

    union all

    select
        shipments.workspace_id,
        shipments.shipment_id,
        shipments.is_history_complete,
        'held-back shipment in fct_recipients' as problem

    from shipments
    inner join fact_recipients
        on shipments.workspace_id = fact_recipients.workspace_id
        and shipments.shipment_id = fact_recipients.shipment_id
    where not shipments.is_history_complete

)

select * from final
