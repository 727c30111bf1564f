{%- set text = dbt.type_string() -%}
{%- set columns = [
    ['id', text],
    ['name', text],
    ['slug', text],
    ['plan', text],
    ['key_name', text],
    ['api_version', text],
    ['_dlt_load_id', text],
] -%}

with

source as (

    {{ signing_completed_rows('workspaces', columns) }}

),

renamed as (

    select
        id as workspace_id,
        name as workspace_name,
        slug as workspace_slug,
        plan,
        key_name as api_key_name,
        api_version,
        -- the load that last wrote the row: every run asks /me, so the workspace's last load
        _dlt_load_id as load_id

    from source

)

select * from renamed
