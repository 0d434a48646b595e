-- Nexmark q3 (local item suggestion): sellers in OR, ID or CA of auctions in category 10. A
-- regular join, as weir's: both sides stay in state, with no time bound.
SELECT P.name, P.city, P.state, A.id
FROM auction AS A
JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA');
