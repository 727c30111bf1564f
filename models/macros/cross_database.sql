{#-
    Small cross-database helpers for what dbt's own macros (`dbt.type_string`, `dbt.datediff`,
    `dbt.date_trunc`, ...) do not cover. Default implementations are DuckDB's; other adapters
    get their own through `adapter.dispatch`.
-#}

{#- A UTC timestamp type; dlt loads every timestamp of the source as one. -#}
{% macro type_timestamp_tz() -%}
    {{ return(adapter.dispatch('type_timestamp_tz', 'signing_funnel')()) }}
{%- endmacro %}

{% macro default__type_timestamp_tz() -%}
    timestamp with time zone
{%- endmacro %}

{% macro snowflake__type_timestamp_tz() -%}
    timestamp_tz
{%- endmacro %}

{% macro bigquery__type_timestamp_tz() -%}
    timestamp
{%- endmacro %}

{#- The text at `key` of a JSON object held as text (null when absent or not an object). -#}
{% macro json_text(expression, key) -%}
    {{ return(adapter.dispatch('json_text', 'signing_funnel')(expression, key)) }}
{%- endmacro %}

{% macro default__json_text(expression, key) -%}
    json_extract_string({{ expression }}, '$."{{ key }}"')
{%- endmacro %}

{% macro postgres__json_text(expression, key) -%}
    (({{ expression }})::json ->> '{{ key }}')
{%- endmacro %}

{% macro snowflake__json_text(expression, key) -%}
    (parse_json({{ expression }}):"{{ key }}")::varchar
{%- endmacro %}

{% macro bigquery__json_text(expression, key) -%}
    json_value({{ expression }}, '$."{{ key }}"')
{%- endmacro %}

{#- The JSON text of the value at `key` of a JSON object held as text. -#}
{% macro json_fragment(expression, key) -%}
    {{ return(adapter.dispatch('json_fragment', 'signing_funnel')(expression, key)) }}
{%- endmacro %}

{% macro default__json_fragment(expression, key) -%}
    cast(json_extract({{ expression }}, '$."{{ key }}"') as {{ dbt.type_string() }})
{%- endmacro %}

{% macro postgres__json_fragment(expression, key) -%}
    (({{ expression }})::json -> '{{ key }}')::text
{%- endmacro %}

{% macro snowflake__json_fragment(expression, key) -%}
    to_json(parse_json({{ expression }}):"{{ key }}")
{%- endmacro %}

{% macro bigquery__json_fragment(expression, key) -%}
    to_json_string(json_query({{ expression }}, '$."{{ key }}"'))
{%- endmacro %}

{#- Hours between two timestamps, with fractions (dbt.datediff alone counts whole units). -#}
{% macro hours_between(first_at, then_at) -%}
    ({{ dbt.datediff(first_at, then_at, 'second') }} / 3600.0)
{%- endmacro %}

{#- Median and 90th percentile of a column, as `median_<name>` and `p90_<name>`: the one place
    that spells the percentile syntax. DuckDB, Postgres and Snowflake take the standard ordered-set
    aggregate; BigQuery has it only as a window function, so its aggregate is approx_quantiles
    (approximate: written, not run here). -#}
{% macro median_and_p90(column, name) -%}
    {{ return(adapter.dispatch('median_and_p90', 'signing_funnel')(column, name)) }}
{%- endmacro %}

{% macro default__median_and_p90(column, name) -%}
    percentile_cont(0.5) within group (order by {{ column }}) as median_{{ name }},
        percentile_cont(0.9) within group (order by {{ column }}) as p90_{{ name }}
{%- endmacro %}

{% macro bigquery__median_and_p90(column, name) -%}
    approx_quantiles({{ column }}, 100)[offset(50)] as median_{{ name }},
        approx_quantiles({{ column }}, 100)[offset(90)] as p90_{{ name }}
{%- endmacro %}
