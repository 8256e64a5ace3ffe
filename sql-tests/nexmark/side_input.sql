-- Nexmark q13's side input: a table of 10,000 keys (the Flink kit reads a file).
CREATE TABLE side_input (key BIGINT PRIMARY KEY, value TEXT);
INSERT INTO side_input SELECT x, 'value ' || x FROM generate_series(0, 9999) AS x;
