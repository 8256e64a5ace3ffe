-- Nexmark q6: Average selling price by seller: for each auction, the average
-- of the winning bids of its seller's auctions up to it (it and the 10
-- before it, in the order they close: expiry, then id).
SELECT q.seller,
    avg(q.final) OVER (PARTITION BY q.seller ORDER BY q.expires, q.id
        ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
FROM (
    SELECT a.id, a.seller, a.expires, max(b.price) AS final
    FROM auction a, bid b
    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.seller, a.expires
) q
