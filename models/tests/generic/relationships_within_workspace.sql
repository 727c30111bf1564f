{#-
    dbt's `relationships`, per workspace: every non-null `column_name` of the model names a row
    of `to` with the same `workspace_id` (ids are unique only within a workspace, so the same
    id in another workspace does not count). Fails with one row per orphan.
-#}
{% test relationships_within_workspace(model, column_name, to, field) %}

with

child as (

    select
        workspace_id,
        {{ column_name }} as value

    from {{ model }}
    where {{ column_name }} is not null

),

parent as (

    select distinct
        workspace_id,
        {{ field }} as value

    from {{ to }}

)

select
    child.workspace_id,
    child.value

from child
left join parent
    on child.workspace_id = parent.workspace_id
    and child.value = parent.value
where parent.value is null

{% endtest %}
