{#-
    A mart's last step: every row of `relation` (a CTE with `workspace_id`) and the name of its
    workspace (GET /me), so no report needs a join to say which workspace a row belongs to.
    Null while the workspace's own record is not loaded.
-#}
{% macro select_with_workspace_name(relation) -%}
    select
        {{ relation }}.*,
        workspaces.workspace_name

    from {{ relation }}
    left join {{ ref('stg_signing__workspaces') }} as workspaces
        on {{ relation }}.workspace_id = workspaces.workspace_id
{%- endmacro %}
