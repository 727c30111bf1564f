{#-
    Models land in exactly the schema they configure (`staging`, `marts`), not in
    `<target schema>_staging` as dbt's default would name it (docs/design.md, warehouse layout).
-#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {%- if custom_schema_name is none -%}
        {{ target.schema }}
    {%- else -%}
        {{ custom_schema_name | trim }}
    {%- endif -%}
{%- endmacro %}
