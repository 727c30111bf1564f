{#-
    Every version of each recipient's attributes that a model build saw (SCD2), kept on the
    recipients' own rows, so a change inside the nested table is a version whether or not its
    shipment's own fields changed. Valid from the time the load that brought the version was
    stored (the shipment's dlt load, or when the pipeline noticed the deletion), not the
    service's time. dim_recipient_versions reads it.
-#}
{% snapshot snp_signing__recipients %}

{{ config(
    unique_key=['workspace_id', 'recipient_id'],
    check_cols=[
        'recipient_position', 'recipient_name', 'recipient_email', 'recipient_phone',
        'recipient_company', 'recipient_status', 'delivery_status', 'delivery_error',
        'count_views', 'sent_at', 'expires_at', 'signed_at', 'last_viewed_at', 'is_deleted',
    ],
) }}

select
    recipients.workspace_id,
    recipients.recipient_id,
    recipients.shipment_id,
    recipients.recipient_position,
    recipients.recipient_name,
    recipients.recipient_email,
    recipients.recipient_phone,
    recipients.recipient_company,
    recipients.recipient_status,
    recipients.delivery_status,
    recipients.delivery_error,
    recipients.count_views,
    recipients.sent_at,
    recipients.expires_at,
    recipients.signed_at,
    recipients.last_viewed_at,
    recipients.is_deleted,
    {{ snapshot_observed_at('recipients.deleted_at', 'shipments.loaded_at') }} as observed_at

from {{ ref('stg_signing__recipients') }} as recipients
inner join {{ ref('stg_signing__shipments') }} as shipments
    on recipients.workspace_id = shipments.workspace_id
    and recipients.shipment_id = shipments.shipment_id

{% endsnapshot %}
