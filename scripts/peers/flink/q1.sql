-- Nexmark q1 (currency conversion): every bid with its price in euros. BIGINT times the
-- DECIMAL(4, 3) literal is an exact DECIMAL, as weir's `price * 0.908` is.
SELECT auction, bidder, price * 0.908 AS price, `dateTime`, extra FROM bid;
