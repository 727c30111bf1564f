{#-
    A record's key across workspaces: `<workspace id>:<id>`. Ids are unique only within a
    workspace (two workspaces' shipments may both be `shp_1`), so a filter or join on an id
    alone mixes workspaces; a filter on its key never does. The one place a key is spelled.
-#}
{% macro workspace_key(id_column, workspace_column='workspace_id') -%}
    {{ dbt.concat([workspace_column, "':'", id_column]) }}
{%- endmacro %}
