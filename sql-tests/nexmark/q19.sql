-- Nexmark q19: Auction top-10 price: each auction's ten highest bids (the earliest of equal prices first; Flink's kit leaves ties to chance).
SELECT *
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time) AS rank_number
    FROM bid
) AS ranked
WHERE rank_number <= 10
