-- Nexmark q17 (auction statistics report): per auction and day, its bids in all and per price
-- rank, and their lowest, highest, mean and total price (AVG of a BIGINT is a BIGINT, the
-- quotient truncated, as weir computes it). The public Nexmark text: a group aggregation with
-- no window, an updating result whose final table is compared with weir's.
SELECT
     auction,
     DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') as `day`,
     count(*) AS total_bids,
     count(*) filter (where price < 10000) AS rank1_bids,
     count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
     count(*) filter (where price >= 1000000) AS rank3_bids,
     min(price) AS min_price,
     max(price) AS max_price,
     avg(price) AS avg_price,
     sum(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd');
