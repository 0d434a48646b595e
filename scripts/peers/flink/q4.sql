-- Nexmark q4 (average price per category): the final price of each auction is its highest bid
-- placed while it was open (both ends included); per category, the mean of the final prices.
-- AVG of a BIGINT is a BIGINT (the quotient truncated toward zero), in weir as in Flink. The
-- public Nexmark text: a regular join and two group aggregations, an updating
-- result whose final table is compared with weir's upserts per category.
SELECT Q.category, AVG(Q.final) AS avg_final
FROM (
  SELECT A.id, A.category, MAX(B.price) AS final
  FROM auction AS A
  JOIN bid AS B ON A.id = B.auction
  WHERE B.`dateTime` BETWEEN A.`dateTime` AND A.expires
  GROUP BY A.id, A.category
) AS Q
GROUP BY Q.category;
