-- Nexmark q22: URL directories: the first three path parts of each bid's URL
-- (Flink's 0-based SPLIT_INDEX 3..5 is split_part 4..6).
SELECT auction, bidder, price, channel,
    split_part(url, '/', 4) AS dir1, split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3
FROM bid
