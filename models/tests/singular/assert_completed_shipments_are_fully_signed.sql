-- A completed shipment is one every recipient signed, and the other way round.

select
    workspace_id,
    shipment_id,
    is_completed,
    count_recipients,
    count_recipients_signed

from {{ ref('fct_shipments') }}
where (is_completed and count_recipients_signed < count_recipients)
    or (not is_completed and count_recipients > 0 and count_recipients_signed = count_recipients)
