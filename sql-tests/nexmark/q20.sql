-- Nexmark q20: Expand bids with their auctions of category 10.
SELECT auction, bidder, price, channel, url, b.date_time AS bid_date_time, b.extra AS bid_extra,
    item_name, description, initial_bid, reserve, a.date_time AS auction_date_time, expires,
    seller, category, a.extra AS auction_extra
FROM bid AS b INNER JOIN auction AS a ON b.auction = a.id
WHERE a.category = 10
