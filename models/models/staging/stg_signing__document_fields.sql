{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['document_id', text],
    ['workspace_id', text],
    ['_dlt_list_idx', dbt.type_int()],
    ['type', text],
    ['label', text],
    ['required', dbt.type_boolean()],
    ['external_id', text],
    ['assigned_recipient_index', dbt.type_int()],
] -%}

with

source as (

    {{ signing_completed_rows('documents__fields', columns, root_table='documents') }}

),

renamed as (

    select
        -- ids
        id as field_id,
        document_id,
        workspace_id,
        external_id,

        -- properties
        _dlt_list_idx as field_index,
        type as field_type,
        label as field_label,
        coalesce(required, false) as is_required,
        -- zero-based position of the recipient who fills the field in; null: any recipient
        assigned_recipient_index

    from source

)

select * from renamed
