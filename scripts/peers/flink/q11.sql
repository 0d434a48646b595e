-- Nexmark q11 (user sessions): bids per bidder per session, a session ending after 10 s
-- without a bid. Flink merges session windows that touch, so a bid exactly 10 s after the
-- previous one stays in its session, as in weir.
SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end;
