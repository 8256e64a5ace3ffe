-- Nexmark q0: Pass-through: every bid as it comes (measures the engine's floor).
SELECT auction, bidder, price, date_time, extra FROM bid
