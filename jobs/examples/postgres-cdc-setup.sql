-- Tables for jobs/examples/postgres-cdc-*.yaml, in a server started with
-- `scripts/pg-cluster.sh start /tmp/pg 5432` (wal_level = logical, user postgres):
--   psql -h 127.0.0.1 -U postgres -f jobs/examples/postgres-cdc-setup.sql
CREATE TABLE IF NOT EXISTS customers (id int PRIMARY KEY, name text NOT NULL, country text);
CREATE TABLE IF NOT EXISTS orders (
  id bigint PRIMARY KEY,
  customer int NOT NULL,
  amount numeric(12, 2) NOT NULL,
  placed timestamptz NOT NULL DEFAULT now()
);
INSERT INTO customers VALUES (1, 'Ada', 'UK'), (2, 'Grace', 'US'), (3, 'Edsger', 'NL')
  ON CONFLICT DO NOTHING;
INSERT INTO orders (id, customer, amount)
  SELECT g, 1 + g % 3, (g * 7 % 100) + 0.99 FROM generate_series(1, 1000) g
  ON CONFLICT DO NOTHING;
