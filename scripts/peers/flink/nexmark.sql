-- The Nexmark events of the JSON-lines file that weir's jobs/nexmark/*-jsonl.yaml read
-- (../shared/nexmark/SCHEMA.md: one event a line, nested under a key named by its type), and
-- one view per event type, as the Flink Nexmark benchmark declares them. scripts/bench_peers.py
-- runs these statements before each query, with ${source} replaced by the source's options:
-- the file (`'connector' = 'filesystem'`, its path, `'format' = 'json'`) or, for the Kafka
-- arm, the topic the file's lines were produced to (`'connector' = 'kafka'`, read from the
-- earliest offset to the latest at the start: bounded, as the file is).
--
-- Event time is the event's dateTime, as in weir's jobs (`event-time: {column: dateTime,
-- max-out-of-orderness: 0s}`): the watermark trails the largest dateTime seen by 1 ms, which is
-- Flink's bounded out-of-orderness of 0 (a watermark t says that no row at t or before follows,
-- and several events share a millisecond). At the end of the file the source emits the final
-- watermark, so every window still open fires, as weir's bounded jobs do.
CREATE TABLE nexmark (
  `type` STRING,
  person ROW<id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING,
             state STRING, `dateTime` BIGINT, extra STRING>,
  auction ROW<id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT,
              `dateTime` BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra STRING>,
  bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING,
          `dateTime` BIGINT, extra STRING>,
  `dateTime` AS TO_TIMESTAMP_LTZ(
    CASE `type` WHEN 'bid' THEN bid.`dateTime`
                WHEN 'auction' THEN auction.`dateTime`
                ELSE person.`dateTime` END, 3),
  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '0.001' SECOND
) WITH (
  ${source}
);

CREATE VIEW person AS
SELECT person.id, person.name, person.emailAddress, person.creditCard, person.city,
       person.state, `dateTime`, person.extra
FROM nexmark WHERE `type` = 'person';

CREATE VIEW auction AS
SELECT auction.id, auction.itemName, auction.description, auction.initialBid, auction.reserve,
       `dateTime`, TO_TIMESTAMP_LTZ(auction.expires, 3) AS expires, auction.seller,
       auction.category, auction.extra
FROM nexmark WHERE `type` = 'auction';

CREATE VIEW bid AS
SELECT bid.auction, bid.bidder, bid.price, bid.channel, bid.url, `dateTime`, bid.extra
FROM nexmark WHERE `type` = 'bid';
