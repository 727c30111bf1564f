{{ config(severity='warn', store_failures=true) }}
-- Names every status value the marts would misfile: one row per workspace, column and value
-- that the service sent and the models do not know (a status the API reference does not list,
-- as a service adds one without notice). The marts count such a row in no stage of the funnel.
-- The values are kept in `dbt_test__audit.assert_known_status_values` after each build, and
-- the load that brought them said so (`pipelines/raw/schema_changes.py`, KNOWN_VALUES, lists
-- the same values).

with

shipments as (

    select workspace_id, 'shipments.status' as column_name, shipment_status as unknown_value
    from {{ ref('stg_signing__shipments') }}
    where shipment_status not in ('sent', 'completed', 'expired', 'revoked')

    union all

    select workspace_id, 'shipments.activity_status', activity_status
    from {{ ref('stg_signing__shipments') }}
    where activity_status not in ('sent', 'opened', 'signed', 'expired', 'revoked')

),

recipients as (

    select workspace_id, 'shipments__recipients.status' as column_name, recipient_status
    from {{ ref('stg_signing__recipients') }}
    where recipient_status not in ('pending', 'sent', 'opened', 'signed')

),

audit_events as (

    select workspace_id, 'audit_events.type' as column_name, event_type
    from {{ ref('stg_signing__audit_events') }}
    where event_type not in (
        'sent', 'delivered', 'opened', 'signed', 'completed', 'expired', 'revoked',
        'delivery_failed'
    )

),

final as (

    select * from shipments
    union all
    select * from recipients
    union all
    select * from audit_events

)

select distinct workspace_id, column_name, unknown_value
from final
