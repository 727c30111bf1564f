-- A recipient is sent the document before opening it and opens it before signing; a
-- shipment is sent after it is created and completed after its first signature.

with

recipients as (

    select * from {{ ref('fct_recipients') }}

),

shipments as (

    select * from {{ ref('fct_shipments') }}

),

recipient_problems as (

    select
        'recipient' as entity,
        workspace_id,
        recipient_id as entity_id,
        case
            when first_opened_at < sent_at then 'opened before sent'
            when signed_at < first_opened_at then 'signed before opened'
            when signed_at < sent_at then 'signed before sent'
            when delivered_at < sent_at then 'delivered before sent'
        end as problem

    from recipients

),

shipment_problems as (

    select
        'shipment' as entity,
        workspace_id,
        shipment_id as entity_id,
        case
            when sent_at < created_at then 'sent before created'
            when first_opened_at < sent_at then 'opened before sent'
            when first_signed_at < first_opened_at then 'signed before opened'
            when completed_at < first_signed_at then 'completed before first signature'
        end as problem

    from shipments

),

final as (

    select * from recipient_problems where problem is not null
    union all
    select * from shipment_problems where problem is not null

)

select * from final
