{#-
    The rows of one raw table that belong to completed dlt loads, with a fixed set of columns.

    - Root tables are filtered on `_dlt_load_id` against `_dlt_loads` (status 0 = completed);
      nested tables (`<root>__<child>`) through their root row (`_dlt_root_id`).
    - dlt creates a column only once a non-null value arrives, and a table only once it has a
      row (a workspace without webhooks has no `webhooks` table). Like Fivetran's
      `fill_staging_columns`, every column of `columns` (a list of [name, type] pairs) is
      selected when it exists and is a typed null when it does not, and a missing table gives
      no rows, so staging models have the same shape on every warehouse.
    - Which columns exist comes from `signing_raw_columns`, asked of the warehouse itself.
-#}
{% macro signing_completed_rows(table_name, columns, root_table=none) -%}
    {%- set relation = source('signing', table_name) -%}
    {%- set loads = source('signing', '_dlt_loads') -%}
    {%- set root = source('signing', root_table) if root_table else none -%}
    {%- set existing = signing_raw_columns(relation) %}
    select
    {%- for name, data_type in columns %}
        {% if name | lower in existing -%}
            cast({{ quoted_column(name) }} as {{ data_type }}) as {{ quoted_column(name) }}
        {%- else -%}
            cast(null as {{ data_type }}) as {{ quoted_column(name) }}
        {%- endif -%}
        {{- "," if not loop.last }}
    {%- endfor %}
    {%- if not existing %}
    where 1 = 0
    {%- elif root is none %}
    from {{ relation }}
    where _dlt_load_id in (
        select load_id from {{ loads }} where status = 0
    )
    {%- else %}
    from {{ relation }}
    where _dlt_root_id in (
        select _dlt_id from {{ root }}
        where _dlt_load_id in (
            select load_id from {{ loads }} where status = 0
        )
    )
    {%- endif %}
{%- endmacro %}
