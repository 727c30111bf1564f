{#-
    Every version of each contact's attributes that a model build saw (SCD2). `updated_at` is
    among the compared columns: a change of custom properties (a nested table) moves it, so it
    is a version too. Valid from the time the load that brought the version was stored, not
    the service's time. dim_contact_versions reads it.
-#}
{% snapshot snp_signing__contacts %}

{{ config(
    unique_key=['workspace_id', 'contact_id'],
    check_cols=[
        'contact_name', 'contact_email', 'contact_phone', 'contact_company', 'job_position',
        'notes', 'updated_at', 'is_deleted',
    ],
) }}

select
    workspace_id,
    contact_id,
    contact_name,
    contact_email,
    contact_phone,
    contact_company,
    job_position,
    notes,
    created_at,
    updated_at,
    is_deleted,
    {{ snapshot_observed_at() }} as observed_at

from {{ ref('stg_signing__contacts') }}

{% endsnapshot %}
