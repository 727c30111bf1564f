-- One row per day from 2015 to 2040: the calendar MetricFlow joins metrics to (its time spine).
-- Built in the `semantic` schema, apart from the marts analysts read.

{{ config(materialized='table', schema='semantic') }}

with

days as (

    {{ dbt.date_spine('day', "cast('2015-01-01' as date)", "cast('2040-01-01' as date)") }}

),

final as (

    select cast(date_day as date) as date_day
    from days

)

select * from final
