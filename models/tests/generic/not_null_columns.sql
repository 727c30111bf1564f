{#-
    None of `columns` holds a null: dbt's `not_null` for many columns of one model in one
    scan and one test node. A build ran about 140 `not_null` nodes, and dbt's own work per
    node (about 65 ms) cost more than every query they ran; this keeps the checks and drops
    that cost. Fails with one row per column that has nulls: its name and how many rows.
-#}
{% test not_null_columns(model, columns) %}

with

null_counts as (

    select
        {%- for column in columns %}
        count(*) - count({{ column }}) as {{ column }}{{ "," if not loop.last }}
        {%- endfor %}

    from {{ model }}

),

per_column as (
    {%- for column in columns %}

    select '{{ column }}' as column_name, {{ column }} as null_rows from null_counts
    {{- "\n    union all" if not loop.last }}
    {%- endfor %}

)

select column_name, null_rows
from per_column
where null_rows > 0

{% endtest %}
