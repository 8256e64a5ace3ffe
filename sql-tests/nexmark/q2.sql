-- Nexmark q2: Selection: bids on a set of auctions.
SELECT auction, price FROM bid WHERE mod(auction, 123) = 0
