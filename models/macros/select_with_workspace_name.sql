{#-
    A mart's last step: every row of `relation` (a CTE with `workspace_id`) and the name of its
    workspace (GET /me), so no report needs a join to say which workspace a row belongs to.
    Null while the workspace's own record is not loaded. `keys` names id columns
    (`shipment_id`, ...) whose key across workspaces (`shipment_key`, macro `workspace_key`)
    the mart carries after them.
-#}
{% macro select_with_workspace_name(relation, keys=[]) -%}
    select
        {{ relation }}.*,
        workspaces.workspace_name
        {%- for id_column in keys %},
        {{ workspace_key(relation ~ '.' ~ id_column, relation ~ '.workspace_id') }}
            as {{ id_column[:-3] ~ '_key' }}
        {%- endfor %}

    from {{ relation }}
    left join {{ ref('stg_signing__workspaces') }} as workspaces
        on {{ relation }}.workspace_id = workspaces.workspace_id
{%- endmacro %}
