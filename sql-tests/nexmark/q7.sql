-- Nexmark q7: Highest bid: the bids at each 10-second window's highest price.
SELECT b.auction, b.price, b.bidder, b.date_time, b.extra
FROM bid b
JOIN (
    SELECT max(price) AS max_price, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) b1 ON b.price = b1.max_price
WHERE b.date_time BETWEEN b1.date_time - INTERVAL '10' SECOND AND b1.date_time
