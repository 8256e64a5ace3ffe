-- Nexmark q13: Bounded side input join: bids joined with a static table (`side_input`,
-- key 0..9999) by auction.
SELECT b.auction, b.bidder, b.price, b.date_time, s.value
FROM bid b JOIN side_input s ON mod(b.auction, 10000) = s.key
