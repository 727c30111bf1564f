-- Recipients carry no contact id, only an e-mail address: this is the one contact per
-- workspace and address (case-insensitive) that a recipient is matched to, among the contacts
-- the service has not deleted. Addresses are
-- unique per workspace in the service (POST /contacts upserts on them); should two contacts
-- share one anyway, the most recently updated wins, so a recipient never fans out.

with

contacts as (

    select * from {{ ref('stg_signing__contacts') }}

),

ranked as (

    select
        workspace_id,
        lower(trim(contact_email)) as email_key,
        contact_id,
        row_number() over (
            partition by workspace_id, lower(trim(contact_email))
            order by updated_at desc, contact_id
        ) as email_rank

    from contacts
    where contact_email is not null
        and not is_deleted

),

final as (

    select
        workspace_id,
        email_key,
        contact_id

    from ranked
    where email_rank = 1

)

select * from final
