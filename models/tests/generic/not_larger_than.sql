{#-
    Funnel sanity: no row's `column_name` exceeds the column `than` (the stage before it),
    e.g. opened shipments never outnumber sent ones. Nulls are not compared.
-#}
{% test not_larger_than(model, column_name, than) %}

select
    {{ column_name }} as value,
    {{ than }} as limit_value

from {{ model }}
where {{ column_name }} > {{ than }}

{% endtest %}
