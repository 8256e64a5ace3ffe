// A node-pg session against Weir: node node_pg_session.js CONNECTION_URL.
//
// Every common type round-trips through parameters and comes back as
// node-pg parses it (integers as numbers, bigint and numeric as exact
// strings, dates as Date, json as objects); a named prepared statement is
// reused; a transaction commits and another rolls back; COPY works both
// ways (pg-copy-streams); a cursor reads in pieces (pg-cursor); the
// catalog describes the table; a materialized view is read after FLUSH.
// Any difference throws; the last line printed is "ok".

const assert = require("node:assert/strict");
const { pipeline } = require("node:stream/promises");
const { Readable } = require("node:stream");
const { Client } = require("pg");
const Cursor = require("pg-cursor");
const { from: copyFrom, to: copyTo } = require("pg-copy-streams");

async function main(url) {
  const client = new Client({ connectionString: url });
  await client.connect();
  await client.query("DROP MATERIALIZED VIEW IF EXISTS node_n");
  await client.query("DROP TABLE IF EXISTS node_kinds");
  await client.query(
    "CREATE TABLE node_kinds (id INT PRIMARY KEY, s SMALLINT, b BIGINT, r REAL, d DOUBLE PRECISION," +
      " n NUMERIC(20,6), t TEXT, bo BOOLEAN, dt DATE, ts TIMESTAMPTZ, j JSONB, by BYTEA)"
  );

  // Literals are typed as PostgreSQL types them.
  const literal = await client.query("SELECT 1 AS one, 2147483648 AS big, 1.5 AS dec");
  assert.deepEqual(literal.rows[0], { one: 1, big: "2147483648", dec: "1.5" });

  const row = [
    1, 7, "9007199254740993", 1.5, 2.25, "12345678901234.123456", "héllo 'q'", true,
    "2024-03-05", new Date("2024-03-05T10:00:01.123Z"), { a: [1, "x"] }, Buffer.from([0, 255, 16]),
  ];
  const marks = row.map((_, i) => `$${i + 1}`).join(", ");
  await client.query({ name: "insert-kind", text: `INSERT INTO node_kinds VALUES (${marks})`, values: row });
  const nulls = [2, ...Array(row.length - 1).fill(null)];
  await client.query({ name: "insert-kind", text: `INSERT INTO node_kinds VALUES (${marks})`, values: nulls });
  const read = await client.query("SELECT * FROM node_kinds ORDER BY id");
  const got = read.rows[0];
  assert.equal(got.id, 1);
  assert.equal(got.s, 7);
  assert.equal(got.b, "9007199254740993");
  assert.equal(got.r, 1.5);
  assert.equal(got.d, 2.25);
  assert.equal(got.n, "12345678901234.123456");
  assert.equal(got.t, "héllo 'q'");
  assert.equal(got.bo, true);
  assert.equal(got.ts.toISOString(), "2024-03-05T10:00:01.123Z");
  assert.deepEqual(got.j, { a: [1, "x"] });
  assert.deepEqual([...got.by], [0, 255, 16]);
  const dates = await client.query("SELECT dt::text AS dt FROM node_kinds WHERE id = 1");
  assert.equal(dates.rows[0].dt, "2024-03-05");
  assert.ok(Object.entries(read.rows[1]).every(([k, v]) => k === "id" || v === null));

  // Parameters in a filter; the column types as the server describes them.
  const filtered = await client.query("SELECT id, n FROM node_kinds WHERE b = $1 AND n > $2", [
    "9007199254740993",
    "1.5",
  ]);
  assert.deepEqual(filtered.rows, [{ id: 1, n: "12345678901234.123456" }]);
  assert.deepEqual(
    read.fields.map((f) => f.dataTypeID),
    [23, 21, 20, 700, 701, 1700, 25, 16, 1082, 1184, 3802, 17]
  );

  // Transactions.
  await client.query("BEGIN");
  await client.query("INSERT INTO node_kinds (id) VALUES (3)");
  await client.query("COMMIT");
  await client.query("BEGIN");
  await client.query("INSERT INTO node_kinds (id) VALUES (4)");
  await client.query("ROLLBACK");
  await assert.rejects(client.query("INSERT INTO node_kinds (id) VALUES (1)"), { code: "23505" });
  const ids = await client.query("SELECT id FROM node_kinds ORDER BY id");
  assert.deepEqual(ids.rows.map((r) => r.id), [1, 2, 3]);

  // COPY both ways.
  const input = client.query(copyFrom("COPY node_kinds (id, t, n) FROM STDIN WITH (FORMAT csv)"));
  await pipeline(Readable.from(["10,copied,1.25\n", "11,\"with, comma\",\n"]), input);
  const chunks = [];
  const output = client.query(copyTo("COPY (SELECT id, t, n FROM node_kinds WHERE id >= 10 ORDER BY id) TO STDOUT WITH (FORMAT csv)"));
  for await (const chunk of output) chunks.push(chunk);
  assert.equal(Buffer.concat(chunks).toString(), '10,copied,1.250000\n11,"with, comma",\n');

  // A cursor read in pieces.
  const cursor = client.query(new Cursor("SELECT id FROM node_kinds ORDER BY id"));
  const seen = [];
  for (;;) {
    const piece = await cursor.read(2);
    if (piece.length === 0) break;
    assert.ok(piece.length <= 2);
    seen.push(...piece.map((r) => r.id));
  }
  await cursor.close();
  assert.deepEqual(seen, [1, 2, 3, 10, 11]);

  // The catalog.
  const columns = await client.query(
    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'node_kinds' ORDER BY ordinal_position"
  );
  assert.equal(columns.rows.length, 12);
  assert.equal(columns.rows[0].column_name, "id");

  // A materialized view after FLUSH.
  await client.query("CREATE MATERIALIZED VIEW node_n AS SELECT count(*) AS rows, sum(n) AS total FROM node_kinds");
  await client.query("INSERT INTO node_kinds (id, n) VALUES (12, 0.75)");
  await client.query("FLUSH");
  const view = await client.query("SELECT rows, total FROM node_n");
  assert.deepEqual(view.rows, [{ rows: "6", total: "12345678901236.123456" }]);

  await client.end();
  console.log("ok");
}

main(process.argv[2]).catch((error) => {
  console.error(error);
  process.exit(1);
});
