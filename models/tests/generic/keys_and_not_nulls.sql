{#-
    A model's keys and its never-null columns, in one test node (named
    `keys_and_not_nulls_<model>`): every key in `keys` (a list of columns; one column for a
    surrogate key, several for a composite one) is unique, and none of `not_null` holds a null.
    It stands for dbt's `unique` and `unique_combination_of_columns` and a `not_null` per
    column, because dbt's own work per test node (about 65 ms) cost more than their queries.

    One scan counts every column's nulls (macro `rows_breaking_each_check`); each key is one
    `group by`, so nulls in a key count as equal values (`not_null` lists the key columns that
    may never be null). Fails with one row per column with nulls (`not null: <column>`, the
    rows, no key value) and one row per repeated key value (`unique: <columns>`, the value as
    text, the rows that share it), so `--store-failures` keeps the duplicates themselves, as
    dbt's `unique` did.
-#}
{% test keys_and_not_nulls(model, keys=[], not_null=[]) %}

{%- set text = dbt.type_string() %}
{%- set null_checks = [] %}
{%- for column in not_null %}
    {%- do null_checks.append(("not null: " ~ column, column ~ " is null")) %}
{%- endfor %}
{%- if not (keys or null_checks) %}
    {{ exceptions.raise_compiler_error("keys_and_not_nulls: give keys, not_null or both") }}
{%- endif %}
{%- for key in keys %}
    {%- if key is string %}
        {{ exceptions.raise_compiler_error(
            "keys_and_not_nulls: each key is a list of columns: [[" ~ key ~ "]], not " ~ key) }}
    {%- elif not key %}
        {{ exceptions.raise_compiler_error("keys_and_not_nulls: a key without columns") }}
    {%- endif %}
{%- endfor %}

with

{%- if null_checks %}

null_columns as (
    {{ rows_breaking_each_check(model, null_checks, "broken_check", "count_rows") | indent(4) }}
),
{%- endif %}
{%- for key in keys %}

repeated_{{ loop.index }} as (

    select
        {%- for column in key %}
        coalesce(cast({{ column }} as {{ text }}), 'null'){{ " || ', ' ||" if not loop.last }}
        {%- endfor %} as key_value,
        count(*) as count_rows

    from {{ model }}
    group by {{ key | join(", ") }}
    having count(*) > 1

),
{%- endfor %}

broken as (
    {%- if null_checks %}

    select broken_check, cast(null as {{ text }}) as key_value, count_rows
    from null_columns
    {{- "\n\n    union all" if keys }}
    {%- endif %}
    {%- for key in keys %}
    {%- set label = "unique: " ~ key | join(", ") %}

    select '{{ label | replace("'", "''") }}' as broken_check, key_value, count_rows
    from repeated_{{ loop.index }}
    {{- "\n\n    union all" if not loop.last }}
    {%- endfor %}

)

select broken_check, key_value, count_rows
from broken

{% endtest %}
