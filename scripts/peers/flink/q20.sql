-- Nexmark q20 (expand bid with auction): every bid joined with its auction, when the auction is
-- in category 10. The public Nexmark text, a regular join; the bid's and the auction's
-- `dateTime` and `extra` named as the columns of its sink table (bid_dateTime, bid_extra,
-- auction_dateTime, auction_extra), which the text fills by position.
SELECT
    auction, bidder, price, channel, url, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
    itemName, description, initialBid, reserve, A.`dateTime` AS auction_dateTime, expires,
    seller, category, A.extra AS auction_extra
FROM
    bid AS B INNER JOIN auction AS A on B.auction = A.id
WHERE A.category = 10;
