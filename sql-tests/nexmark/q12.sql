-- Nexmark q12: Processing-time windows: each bidder's bids per 10-second window of the time they were read.
WITH b AS (SELECT *, PROCTIME() AS p_time FROM bid)
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TUMBLE(b, p_time, INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end
