-- Nexmark q8 (monitor new users): people who created an auction in the tumbling 10 s window
-- in which they registered, once per (person, window). The public Nexmark text: a window join
-- of two window aggregations.
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) AS P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) AS A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
