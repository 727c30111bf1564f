{#-
    Every version of each contact's attributes that a model build saw (SCD2): a new version
    only when one of the attributes it holds changed. `updated_at` is kept but not compared:
    the service moves it for changes the snapshot does not hold (custom properties, a nested
    table, whose current values are in stg_signing__contact_custom_properties) and for edits
    that change nothing, and a version that differs only in it answers no "what changed".
    Valid from the time the load that brought the version was stored, not the service's time.
    dim_contact_versions reads it.
-#}
{% snapshot snp_signing__contacts %}

{{ config(
    unique_key=['workspace_id', 'contact_id'],
    check_cols=[
        'contact_name', 'contact_email', 'contact_phone', 'contact_company', 'job_position',
        'notes', 'is_deleted',
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
