-- Nexmark q1: Currency conversion: bid prices in euros.
SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid
