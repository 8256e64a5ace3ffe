-- Nexmark q11: User sessions: each bidder's bids per session (bids less than 10 seconds apart).
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder)
GROUP BY bidder, window_start, window_end
