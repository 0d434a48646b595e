-- Nexmark q5 (hot items): per sliding window of 10 s every 2 s, the auctions with the most
-- bids, ties kept. The public Nexmark text: per-auction counts joined with the per-window
-- maximum of those counts. Both sides are window aggregations (the maximum a cascaded one over
-- the counts' windows), so Flink plans a window join that emits each window once, when the
-- watermark passes its end. (Flink's window Top-N would be shorter, but it supports only
-- ROW_NUMBER, which drops ties.)
CREATE TEMPORARY VIEW auction_bids AS
SELECT auction, COUNT(*) AS num, window_start, window_end
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;

SELECT A.auction, A.num, A.window_start AS starttime, A.window_end AS endtime
FROM auction_bids AS A
JOIN (
  SELECT MAX(num) AS maxn, window_start, window_end
  FROM auction_bids
  GROUP BY window_start, window_end
) AS M
ON A.window_start = M.window_start AND A.window_end = M.window_end AND A.num >= M.maxn;
