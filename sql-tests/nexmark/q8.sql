-- Nexmark q8: Monitor new users: people who created auctions in the 10-second window they joined in.
SELECT p.id, p.name, p.start_time
FROM (
    SELECT id, name, window_start AS start_time, window_end AS end_time
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) p
JOIN (
    SELECT seller, window_start AS start_time, window_end AS end_time
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) a ON p.id = a.seller AND p.start_time = a.start_time AND p.end_time = a.end_time
