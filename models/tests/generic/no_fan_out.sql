{#-
    The model has exactly as many rows as `compare_model` (optionally filtered by
    `compare_where`): a join on the way from staging to a mart neither duplicated nor dropped
    rows. Fails with one row that shows both counts. `compare_where` may name the compared
    model's columns as `compared.<column>` (in a correlated subquery, for instance).
-#}
{% test no_fan_out(model, compare_model, compare_where=none) %}

with

model_rows as (

    select count(*) as count_rows from {{ model }}

),

compare_rows as (

    select count(*) as count_rows
    from {{ compare_model }} as compared
    {%- if compare_where %}
    where {{ compare_where }}
    {%- endif %}

)

select
    model_rows.count_rows as count_model_rows,
    compare_rows.count_rows as count_compare_rows

from model_rows
cross join compare_rows
where model_rows.count_rows <> compare_rows.count_rows

{% endtest %}
