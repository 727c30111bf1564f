{#-
    Every rule on the model's values holds, all of them in one scan and one test node: like
    `keys_and_not_nulls`, this keeps dbt's per-column checks (`accepted_range`, `accepted_values`,
    "no larger than the stage before") and drops dbt's own work per test node, which cost more
    than the queries did.

    `rules` is a list; each names a `column` (a column or an expression of columns) and one of:
      min_value / max_value  the value lies between them (inclusive; either may be a column);
      not_larger_than        the value is at most this column's (e.g. opened <= sent);
      values                 the value is one of these (strings).
    A null is never compared, so it breaks no rule (`keys_and_not_nulls` lists the never-null).
    Fails with one row per broken rule: the rule as written and how many rows break it.
-#}
{% test column_rules(model, rules) %}

{%- set checks = [] %}
{%- for rule in rules %}
    {%- set column = rule["column"] %}
    {%- if "values" in rule %}
        {%- set listed = [] %}
        {%- for value in rule["values"] %}
            {%- do listed.append("'" ~ (value | string | replace("'", "''")) ~ "'") %}
        {%- endfor %}
        {%- set broken = column ~ " not in (" ~ listed | join(", ") ~ ")" %}
        {%- set holds = column ~ " in (" ~ rule["values"] | join(", ") ~ ")" %}
    {%- elif "not_larger_than" in rule %}
        {%- set broken = column ~ " > " ~ rule["not_larger_than"] %}
        {%- set holds = column ~ " <= " ~ rule["not_larger_than"] %}
    {%- elif "min_value" in rule and "max_value" in rule %}
        {%- set broken = column ~ " < " ~ rule["min_value"] ~ " or " ~ column ~ " > " ~ rule["max_value"] %}
        {%- set holds = column ~ " between " ~ rule["min_value"] ~ " and " ~ rule["max_value"] %}
    {%- elif "min_value" in rule %}
        {%- set broken = column ~ " < " ~ rule["min_value"] %}
        {%- set holds = column ~ " >= " ~ rule["min_value"] %}
    {%- elif "max_value" in rule %}
        {%- set broken = column ~ " > " ~ rule["max_value"] %}
        {%- set holds = column ~ " <= " ~ rule["max_value"] %}
    {%- else %}
        {{ exceptions.raise_compiler_error("column_rules: a rule on " ~ column ~ " needs min_value, max_value, not_larger_than or values") }}
    {%- endif %}
    {%- do checks.append((holds, broken)) %}
{%- endfor %}

{{ rows_breaking_each_check(model, checks, "broken_rule", "broken_rows") }}

{% endtest %}
