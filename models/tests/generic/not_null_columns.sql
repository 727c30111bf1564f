{#-
    None of `columns` holds a null: dbt's `not_null` for many columns of one model in one
    scan and one test node. A build ran about 140 `not_null` nodes, and dbt's own work per
    node (about 65 ms) cost more than every query they ran; this keeps the checks and drops
    that cost. Fails with one row per column that has nulls: its name and how many rows.
-#}
{% test not_null_columns(model, columns) %}

{%- set checks = [] %}
{%- for column in columns %}
    {%- do checks.append((column, column ~ " is null")) %}
{%- endfor %}

{{ rows_breaking_each_check(model, checks, "column_name", "null_rows") }}

{% endtest %}
