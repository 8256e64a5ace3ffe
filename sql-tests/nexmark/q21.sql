-- Nexmark q21: Add a channel id: the hot channels' fixed ids, the others' from their URL.
SELECT auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE substring(url FROM '(?:&|^)channel_id=([^&]*)')
    END AS channel_id
FROM bid
WHERE substring(url FROM '(?:&|^)channel_id=([^&]*)') IS NOT NULL
    OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')
