-- Nexmark q4: Average price per category: the winning (highest) bid of each auction
-- within its lifetime, averaged per category.
SELECT q.category, avg(q.final) AS avg
FROM (
    SELECT max(b.price) AS final, a.category
    FROM auction a, bid b
    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) q
GROUP BY q.category
