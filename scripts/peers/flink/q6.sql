-- Nexmark q6 (average selling price by seller): each time one of a seller's auctions closes
-- with a winning bid, the mean final price of the seller's last 10 closed auctions.
--
-- The public Nexmark text (an OVER window on a regular join's group aggregation) does not run
-- on Flink: an OVER aggregation needs an append-only input ordered by a time attribute, and the
-- final price of an auction is an updating result. So this text makes the close of an auction
-- an event: a second table over the same events (file or topic) whose time attribute is an auction's `expires`
-- (a bid's `dateTime`), with a watermark that trails by the longest auction (the generator's
-- auctions last under a second at its default rate; 10 s leaves room). Then
--   1. an interval join takes the bids placed while each auction was open (both ends included),
--   2. a 1 ms tumbling window at `expires` emits each auction's final price once, when it closes,
--   3. a temporal sort puts the closed auctions in order of expires, then auction id: an OVER
--      window orders by its time attribute alone and takes rows of one millisecond in arrival
--      order (without this step 3,069 of the 55,911 rows of 1 M events differed from weir's),
--   4. an OVER window per seller, in that order, averages the last 10 (AVG of a BIGINT
--      truncates, the floor weir computes for positive prices).
CREATE TEMPORARY TABLE closings (
  `type` STRING,
  auction ROW<id BIGINT, `dateTime` BIGINT, expires BIGINT, seller BIGINT>,
  bid ROW<auction BIGINT, price BIGINT, `dateTime` BIGINT>,
  person ROW<`dateTime` BIGINT>,
  closing AS TO_TIMESTAMP_LTZ(
    CASE `type` WHEN 'bid' THEN bid.`dateTime`
                WHEN 'auction' THEN auction.expires
                ELSE person.`dateTime` END, 3),
  WATERMARK FOR closing AS closing - INTERVAL '10' SECOND
) WITH (
  ${source}
);

CREATE TEMPORARY VIEW closing_bid AS
SELECT bid.auction, bid.price, bid.`dateTime` AS placed_ms, closing AS placed
FROM closings WHERE `type` = 'bid';

CREATE TEMPORARY VIEW closing_auction AS
SELECT auction.id, auction.seller, auction.`dateTime` AS opened_ms, closing AS expires
FROM closings WHERE `type` = 'auction';

CREATE TEMPORARY VIEW bids_in_time AS
SELECT A.id, A.seller, A.expires, B.price
FROM closing_auction AS A
JOIN closing_bid AS B
ON A.id = B.auction
   AND B.placed BETWEEN A.expires - INTERVAL '10' SECOND AND A.expires
   AND B.placed_ms >= A.opened_ms;

CREATE TEMPORARY VIEW final_prices AS
SELECT id, seller, MAX(price) AS final, window_time AS closed
FROM TABLE(TUMBLE(TABLE bids_in_time, DESCRIPTOR(expires), INTERVAL '0.001' SECOND))
GROUP BY id, seller, window_start, window_end, window_time;

CREATE TEMPORARY VIEW closed_in_order AS
SELECT * FROM final_prices ORDER BY closed, id;

SELECT seller,
       AVG(final) OVER (PARTITION BY seller ORDER BY closed
                        ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg_price
FROM closed_in_order;
