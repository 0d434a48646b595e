-- Nexmark q14 (calculation): bids priced between 1,000,000 and 50,000,000 after × 0.908, each
-- with that price, whether it was placed by day or by night, and how many 'c's its `extra`
-- holds. The public Nexmark text, with its user-defined function count_char (weir's Java class
-- of the same meaning, udf/weir/peers/CountChar.java, compiled by scripts/bench-peers.sh).
-- Its sink table's price is DECIMAL(23, 3): `0.908 * price` is an exact decimal here too.
CREATE FUNCTION count_char AS 'weir.peers.CountChar';

SELECT
    auction,
    bidder,
    0.908 * price AS price,
    CASE
        WHEN HOUR(`dateTime`) >= 8 AND HOUR(`dateTime`) <= 18 THEN 'dayTime'
        WHEN HOUR(`dateTime`) <= 6 OR HOUR(`dateTime`) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    `dateTime`,
    extra,
    count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
