{#-
    When the warehouse saw a snapshotted row's version (every snapshot's `observed_at`, its
    `updated_at` in dbt_project.yml): the time the dlt load that brought it was stored, or, for
    a record the service deleted, when the pipeline noticed the deletion if that came later (a
    deletion writes no new load). `deleted_at` is null while the record lives. Times on the
    pipeline's clock, not the service's.
-#}
{% macro snapshot_observed_at(deleted_at='deleted_at', loaded_at='loaded_at') -%}
    case when {{ deleted_at }} > {{ loaded_at }} then {{ deleted_at }} else {{ loaded_at }} end
{%- endmacro %}
