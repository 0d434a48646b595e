-- Nexmark q9 (winning bids): each auction with its winning bid, the highest bid placed while it
-- was open, ties to the earliest bid, then the lowest bidder (weir's order). The public Nexmark
-- text: a regular join and a Top-1 per auction, an updating result whose final table (one row
-- per auction) is compared with weir's rows.
SELECT id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category,
       extra, auction, bidder, price, bid_dateTime, bid_extra
FROM (
  SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
         ROW_NUMBER() OVER (PARTITION BY A.id
                            ORDER BY B.price DESC, B.`dateTime` ASC, B.bidder ASC) AS rownum
  FROM auction AS A
  JOIN bid AS B ON A.id = B.auction
  WHERE B.`dateTime` BETWEEN A.`dateTime` AND A.expires
)
WHERE rownum <= 1;
