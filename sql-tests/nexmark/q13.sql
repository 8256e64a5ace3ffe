-- Nexmark q13: Bounded side input join: bids joined with a static table (`side_input`,
-- key 0..9999) by auction, looked up as each bid is processed (the Flink kit's lookup
-- join): the view keeps the side input, not the bids.
SELECT b.auction, b.bidder, b.price, b.date_time, s.value
FROM bid b JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() AS s ON mod(b.auction, 10000) = s.key
