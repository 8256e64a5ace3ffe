-- Nexmark q5: Hot items: the auctions with the most bids in each 10-second window, every 2 seconds.
SELECT auction_bids.auction, auction_bids.num
FROM (
    SELECT auction, count(*) AS num, window_start AS start_time, window_end AS end_time
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY auction, window_start, window_end
) AS auction_bids
JOIN (
    SELECT max(count_bids.num) AS max_num, count_bids.start_time, count_bids.end_time
    FROM (
        SELECT count(*) AS num, window_start AS start_time, window_end AS end_time
        FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
        GROUP BY auction, window_start, window_end
    ) AS count_bids
    GROUP BY count_bids.start_time, count_bids.end_time
) AS max_bids
ON auction_bids.start_time = max_bids.start_time
    AND auction_bids.end_time = max_bids.end_time
    AND auction_bids.num >= max_bids.max_num
