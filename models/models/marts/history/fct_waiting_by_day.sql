-- One row per workspace and UTC day, from the first day a signer was waited on to the last
-- day a wait began or ended: how many shipments were waiting on a signer, and how many signers
-- were waited on, at the end of that day (the last instant before midnight UTC; see
-- fct_signer_waits). Days on which nothing was waiting are there, with zeros.

with recursive

waits as (

    select
        workspace_id,
        shipment_id,
        recipient_id,
        {{ day_start('waiting_since') }} as first_day,
        {{ day_start('waiting_until') }} as end_day

    from {{ ref('fct_signer_waits') }}

),

bounds as (

    select
        workspace_id,
        min(first_day) as first_day,
        max(case when end_day > first_day then end_day else first_day end) as last_day

    from waits
    group by 1

),

days as (

    select workspace_id, first_day as waiting_day, last_day
    from bounds

    union all

    select workspace_id, {{ next_day('waiting_day') }} as waiting_day, last_day
    from days
    where waiting_day < last_day

),

waiting as (

    select
        days.workspace_id,
        days.waiting_day,
        count(distinct waits.shipment_id) as count_shipments_waiting,
        count(waits.recipient_id) as count_signers_waiting

    from days
    inner join waits
        on days.workspace_id = waits.workspace_id
        and waits.first_day <= days.waiting_day
        and (waits.end_day is null or waits.end_day > days.waiting_day)
    group by 1, 2

),

final as (

    select
        days.workspace_id,
        days.waiting_day,
        coalesce(waiting.count_shipments_waiting, 0) as count_shipments_waiting,
        coalesce(waiting.count_signers_waiting, 0) as count_signers_waiting

    from days
    left join waiting
        on days.workspace_id = waiting.workspace_id
        and days.waiting_day = waiting.waiting_day

)

{{ select_with_workspace_name('final') }}
