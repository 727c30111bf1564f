{#- No two rows share the same values of all `combination_of_columns` (a composite key). -#}
{% test unique_combination_of_columns(model, combination_of_columns) %}

select
    {{ combination_of_columns | join(',\n    ') }},
    count(*) as count_rows

from {{ model }}
group by {{ combination_of_columns | join(', ') }}
having count(*) > 1

{% endtest %}
