{#-
    Every version of each shipment's attributes that a model build saw, as dbt keeps them (an
    SCD2 table): a new version when one of `check_cols` changed, valid from the time the load
    that brought it was stored (`observed_at`: the dlt load's time, or when the pipeline
    noticed the deletion), not the service's time; a version loaded and replaced between two
    builds is never seen. dim_shipment_versions reads it.
-#}
{% snapshot snp_signing__shipments %}

{{ config(
    unique_key=['workspace_id', 'shipment_id'],
    check_cols=[
        'document_id', 'document_name', 'folder_id', 'shipment_status', 'activity_status',
        'channel', 'sign_mode', 'signature_level', 'owner_name', 'owner_email',
        'is_password_protected', 'is_final_pdf_ready', 'is_sealed', 'expires_at', 'archived_at',
        'revoked_at', 'is_deleted',
    ],
) }}

select
    workspace_id,
    shipment_id,
    document_id,
    document_name,
    folder_id,
    shipment_status,
    activity_status,
    channel,
    sign_mode,
    signature_level,
    owner_name,
    owner_email,
    is_password_protected,
    is_final_pdf_ready,
    is_sealed,
    created_at,
    expires_at,
    archived_at,
    revoked_at,
    is_deleted,
    {{ snapshot_observed_at() }} as observed_at

from {{ ref('stg_signing__shipments') }}

{% endsnapshot %}
