-- Nexmark q7 (highest bid): per tumbling 10 s window [s, s + 10 s), every bid at the window's
-- highest price, ties kept. The public Nexmark text joins bids with per-window maxima on
-- `dateTime BETWEEN end - 10 s AND end`, which also takes a bid at exactly the next window's
-- start; this joins each bid with the maximum of its own window instead: a window join of the
-- windowed bids with the window aggregation. (Flink's window Top-N supports only ROW_NUMBER,
-- which drops ties.)
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND)) AS B
JOIN (
  SELECT MAX(price) AS maxprice, window_start, window_end
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) AS M
ON B.window_start = M.window_start AND B.window_end = M.window_end AND B.price = M.maxprice;
