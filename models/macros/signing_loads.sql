{#-
    When each completed dlt load was stored (`_dlt_loads.inserted_at`, the loading machine's
    clock): one row per load id. A row's `_dlt_load_id` names the load that last wrote it, so
    this is when the warehouse last saw the row change (the snapshots' `observed_at`).
-#}
{% macro signing_loads() -%}
    select
        load_id,
        min(inserted_at) as loaded_at

    from {{ source('signing', '_dlt_loads') }}
    where status = 0
    group by 1
{%- endmacro %}
