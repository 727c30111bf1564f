{#-
    The body of a test that checks many things in one scan (`column_rules`, the null counts of
    `keys_and_not_nulls`): `checks` is a list of (label, condition) pairs, the condition true on
    a row that breaks the check. Counts those rows per check in one pass over `relation`, and
    returns one row per check that some row breaks: its label (as `label_column`) and the count
    (as `count_column`). A condition that is null on a row (a null compared) does not count it.
-#}
{% macro rows_breaking_each_check(relation, checks, label_column, count_column) %}

with

broken_counts as (

    select
        {%- for label, broken in checks %}
        count(case when {{ broken }} then 1 end) as check_{{ loop.index }}{{ "," if not loop.last }}
        {%- endfor %}

    from {{ relation }}

),

per_check as (
    {%- for label, broken in checks %}

    select '{{ label | replace("'", "''") }}' as {{ label_column }}, check_{{ loop.index }} as {{ count_column }}
    from broken_counts
    {{- "\n    union all" if not loop.last }}
    {%- endfor %}

)

select {{ label_column }}, {{ count_column }}
from per_check
where {{ count_column }} > 0

{% endmacro %}
