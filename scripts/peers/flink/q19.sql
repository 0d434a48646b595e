-- Nexmark q19 (auction top-10 price): the ten highest bids of each auction. The public Nexmark
-- text: a Top-N with no window, an updating result. Its rows carry their rank_number, which
-- Flink keeps current (a bid entering an auction's ten moves the ones below it down: an update
-- each); weir's running Top-N has no rank column yet, so the check compares the final tables
-- without it (FLINK_ONLY_COLUMNS in scripts/bench_peers.py).
SELECT * FROM
(SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid)
WHERE rank_number <= 10;
