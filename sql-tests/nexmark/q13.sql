-- Nexmark q13: Bounded side input join: bids joined with a static table (`side_input`,
-- key 0..9999) by auction, looked up as each bid is processed: the Flink kit's lookup
-- join, as the kit writes it. The view keeps the side input, not the bids.
SELECT B.auction, B.bidder, B.price, B.date_time, S.value
FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
ON mod(B.auction, 10000) = S.key
