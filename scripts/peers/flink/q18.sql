-- Nexmark q18 (find last bid): each bidder's last bid on each auction. The public Nexmark
-- text: a deduplication on event time (ROW_NUMBER ordered by the time attribute, keep the
-- first), an updating result whose final table (one row per bidder and auction) is compared
-- with weir's. Of a bidder's bids on an auction in the same millisecond, Flink keeps the last
-- to arrive (its deduplication replaces a row on an equal time) and weir's running Top-1 the
-- first, so the two tables differ on those keys (BENCHMARKS.md).
SELECT auction, bidder, price, channel, url, `dateTime`, extra
 FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rank_number
       FROM bid)
 WHERE rank_number <= 1;
