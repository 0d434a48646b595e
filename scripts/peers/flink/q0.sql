-- Nexmark q0 (pass-through): every bid, unchanged.
SELECT auction, bidder, price, `dateTime`, extra FROM bid;
