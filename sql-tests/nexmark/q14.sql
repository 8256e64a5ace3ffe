-- Nexmark q14: Calculation: converted prices in a range, the time of day of each bid,
-- and a count of 'c' in extra (the Flink kit's count_char UDF, in SQL).
SELECT auction, bidder, 0.908 * price AS price,
    CASE
        WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime'
        WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bid_time_type,
    date_time, extra,
    length(extra) - length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
