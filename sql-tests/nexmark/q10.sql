-- Nexmark q10: Log to file system: every bid with its day and minute, written by a file sink.
SELECT auction, bidder, price, date_time, extra,
       to_char(date_time, 'YYYY-MM-DD') AS dt, to_char(date_time, 'HH24:MI') AS hm
FROM bid
