// A postgres.js session against Weir: node postgres_js_session.js URL.
//
// postgres.js reads the type catalog at connect (array types), prepares
// every statement, and parses results by type: integers as numbers,
// bigint and numeric as exact strings, timestamps as Date, json as
// objects. Types round-trip through parameters; sql.begin commits, and
// rolls back on a thrown error; COPY works both ways; a cursor reads in
// pieces; a materialized view is read after FLUSH. Any difference throws;
// the last line printed is "ok".

const assert = require("node:assert/strict");
const { pipeline } = require("node:stream/promises");
const { Readable } = require("node:stream");
const postgres = require("postgres");

async function main(url) {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  await sql`DROP MATERIALIZED VIEW IF EXISTS pjs_n`;
  await sql`DROP TABLE IF EXISTS pjs_kinds`;
  await sql`CREATE TABLE pjs_kinds (id INT PRIMARY KEY, b BIGINT, d DOUBLE PRECISION,
    n NUMERIC(20,6), t TEXT, bo BOOLEAN, ts TIMESTAMPTZ, j JSONB, a INT[])`;

  const [literal] = await sql`SELECT 1 AS one, 2147483648 AS big, 1.5 AS dec`;
  assert.deepEqual({ ...literal }, { one: 1, big: "2147483648", dec: "1.5" });

  const when = new Date("2024-03-05T10:00:01.123Z");
  await sql`INSERT INTO pjs_kinds VALUES (1, ${"9007199254740993"}, ${2.25}, ${"12345678901234.123456"},
    ${"héllo 'q'"}, ${true}, ${when}, ${sql.json({ a: [1, "x"] })}, ${[1, 2, 3]})`;
  await sql`INSERT INTO pjs_kinds (id) VALUES (${2})`;
  const rows = await sql`SELECT * FROM pjs_kinds ORDER BY id`;
  const got = rows[0];
  assert.equal(got.id, 1);
  assert.equal(got.b, "9007199254740993");
  assert.equal(got.d, 2.25);
  assert.equal(got.n, "12345678901234.123456");
  assert.equal(got.t, "héllo 'q'");
  assert.equal(got.bo, true);
  assert.equal(got.ts.toISOString(), when.toISOString());
  assert.deepEqual(got.j, { a: [1, "x"] });
  assert.deepEqual(got.a, [1, 2, 3]);
  assert.ok(Object.entries(rows[1]).every(([k, v]) => k === "id" || v === null));

  const filtered = await sql`SELECT id FROM pjs_kinds WHERE n > ${"1.5"} AND t = ${"héllo 'q'"}`;
  assert.deepEqual(filtered.map((r) => r.id), [1]);

  // Transactions: committed, and rolled back by a thrown error.
  await sql.begin(async (tx) => {
    await tx`INSERT INTO pjs_kinds (id) VALUES (3)`;
  });
  await assert.rejects(
    sql.begin(async (tx) => {
      await tx`INSERT INTO pjs_kinds (id) VALUES (4)`;
      throw new Error("undo");
    }),
    /undo/
  );
  await assert.rejects(sql`INSERT INTO pjs_kinds (id) VALUES (1)`, { code: "23505" });
  const ids = await sql`SELECT id FROM pjs_kinds ORDER BY id`;
  assert.deepEqual(ids.map((r) => r.id), [1, 2, 3]);

  // COPY both ways.
  const input = await sql`COPY pjs_kinds (id, t) FROM STDIN WITH (FORMAT csv)`.writable();
  await pipeline(Readable.from(["10,copied\n", "11,\"with, comma\"\n"]), input);
  const output = await sql`COPY (SELECT id, t FROM pjs_kinds WHERE id >= 10 ORDER BY id) TO STDOUT WITH (FORMAT csv)`.readable();
  const chunks = [];
  for await (const chunk of output) chunks.push(chunk);
  assert.equal(Buffer.concat(chunks).toString(), '10,copied\n11,"with, comma"\n');

  // A cursor read in pieces.
  const seen = [];
  for await (const piece of sql`SELECT id FROM pjs_kinds ORDER BY id`.cursor(2)) {
    assert.ok(piece.length <= 2);
    seen.push(...piece.map((r) => r.id));
  }
  assert.deepEqual(seen, [1, 2, 3, 10, 11]);

  // A materialized view after FLUSH.
  await sql`CREATE MATERIALIZED VIEW pjs_n AS SELECT count(*) AS rows FROM pjs_kinds`;
  await sql`INSERT INTO pjs_kinds (id) VALUES (12)`;
  await sql`FLUSH`;
  const [view] = await sql`SELECT rows FROM pjs_n`;
  assert.equal(view.rows, "6");

  await sql.end();
  console.log("ok");
}

main(process.argv[2]).catch((error) => {
  console.error(error);
  process.exit(1);
});
