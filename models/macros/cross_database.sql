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
    json_query({{ expression }}, '$."{{ key }}"')
{%- endmacro %}

{#- A column the raw tables name with a word SQL reserves somewhere (`at`, `position`), quoted
    as the destination spells it: dlt folds Snowflake's names to upper case. -#}
{% macro quoted_column(name) -%}
    {{ return(adapter.dispatch('quoted_column', 'signing_funnel')(name)) }}
{%- endmacro %}

{% macro default__quoted_column(name) -%}
    {{ adapter.quote(name) }}
{%- endmacro %}

{% macro snowflake__quoted_column(name) -%}
    {{ adapter.quote(name | upper) }}
{%- endmacro %}

{#- Whole seconds between two timestamps with time zone (second boundaries crossed, as
    `dbt.datediff(..., 'second')` counts them), from their epochs: dbt.datediff casts to a
    local timestamp first on DuckDB and Postgres, so a difference across a daylight-saving
    change was off by an hour in a session whose time zone is not UTC. -#}
{% macro seconds_between(first_at, then_at) -%}
    {{ return(adapter.dispatch('seconds_between', 'signing_funnel')(first_at, then_at)) }}
{%- endmacro %}

{% macro default__seconds_between(first_at, then_at) -%}
    (floor(date_part('epoch', {{ then_at }})) - floor(date_part('epoch', {{ first_at }})))
{%- endmacro %}

{% macro snowflake__seconds_between(first_at, then_at) -%}
    (date_part(epoch_second, {{ then_at }}) - date_part(epoch_second, {{ first_at }}))
{%- endmacro %}

{% macro bigquery__seconds_between(first_at, then_at) -%}
    (unix_seconds({{ then_at }}) - unix_seconds({{ first_at }}))
{%- endmacro %}

{#- Hours between two timestamps, with fractions (dbt.datediff alone counts whole units). -#}
{% macro hours_between(first_at, then_at) -%}
    ({{ seconds_between(first_at, then_at) }} / 3600.0)
{%- endmacro %}

{#- The Monday (UTC) of the ISO week a timestamp with time zone falls in, as a date, whatever
    the session's time zone (`dbt.date_trunc('week', ...)` cuts in the session's zone on
    DuckDB and Postgres, and BigQuery's weeks start on Sunday). -#}
{% macro week_start(column) -%}
    {{ return(adapter.dispatch('week_start', 'signing_funnel')(column)) }}
{%- endmacro %}

{% macro default__week_start(column) -%}
    cast({{ dbt.date_trunc('week', '(' ~ column ~ ") at time zone 'UTC'") }} as date)
{%- endmacro %}

{% macro snowflake__week_start(column) -%}
    {%- set day = "to_date(convert_timezone('UTC', " ~ column ~ "))" -%}
    dateadd(day, 1 - dayofweekiso({{ day }}), {{ day }})
{%- endmacro %}

{% macro bigquery__week_start(column) -%}
    date_trunc(date({{ column }}, 'UTC'), isoweek)
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

{#- The UTC calendar day a timestamp with time zone falls in, as a date, whatever the session's
    time zone (a plain cast to date cuts in the session's zone on DuckDB and Postgres). -#}
{% macro day_start(column) -%}
    {{ return(adapter.dispatch('day_start', 'signing_funnel')(column)) }}
{%- endmacro %}

{% macro default__day_start(column) -%}
    cast(({{ column }}) at time zone 'UTC' as date)
{%- endmacro %}

{% macro snowflake__day_start(column) -%}
    to_date(convert_timezone('UTC', {{ column }}))
{%- endmacro %}

{% macro bigquery__day_start(column) -%}
    date({{ column }}, 'UTC')
{%- endmacro %}

{#- The day after a date, as a date. -#}
{% macro next_day(column) -%}
    cast({{ dbt.dateadd('day', 1, column) }} as date)
{%- endmacro %}
