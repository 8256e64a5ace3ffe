"""An asyncpg session against Weir: python3 asyncpg_session.py DSN.

asyncpg speaks only the extended protocol with binary values and infers
every parameter's type from the server's description. Every common type
round-trips as parameters and results and through binary COPY
(copy_records_to_table), prepared statements are reused, transactions
commit and roll back, jsonb round-trips (as text, asyncpg's default, and
through a json codec), arrays of integers, text and floats round-trip
(asyncpg introspects their types first), COPY TO returns CSV, a cursor reads in pieces, and
a materialized view is read after FLUSH. Any difference raises; the last
line printed is "ok".
"""

import asyncio
import datetime
import decimal
import io
import json
import sys

import asyncpg

COLUMNS = ["id", "s", "b", "r", "d", "n", "t", "bo", "dt", "ts", "tz", "tm", "iv", "by"]
ROW = (
    1,
    7,
    9007199254740993,
    1.5,
    2.25,
    decimal.Decimal("12345678901234.123456"),
    "héllo",
    True,
    datetime.date(2024, 3, 5),
    datetime.datetime(2024, 3, 5, 10, 0, 1, 123456),
    datetime.datetime(2024, 3, 5, 10, 0, 1, tzinfo=datetime.timezone.utc),
    datetime.time(10, 1, 2),
    datetime.timedelta(days=1, seconds=5),
    b"\x00\xff",
)
NULLS = (2,) + (None,) * (len(ROW) - 1)


def check(what, got, expected):
    if got != expected:
        raise AssertionError(f"{what}: got {got!r}, expected {expected!r}")


async def main(dsn):
    conn = await asyncpg.connect(dsn)
    await conn.execute("DROP MATERIALIZED VIEW IF EXISTS akinds_n")
    await conn.execute("DROP TABLE IF EXISTS akinds")
    await conn.execute(
        "CREATE TABLE akinds (id INT PRIMARY KEY, s SMALLINT, b BIGINT, r REAL,"
        " d DOUBLE PRECISION, n NUMERIC(20,6), t TEXT, bo BOOLEAN, dt DATE, ts TIMESTAMP,"
        " tz TIMESTAMPTZ, tm TIME, iv INTERVAL, by BYTEA)"
    )
    marks = ", ".join(f"${i + 1}" for i in range(len(ROW)))
    insert = await conn.prepare(f"INSERT INTO akinds VALUES ({marks})")
    await insert.executemany([ROW, NULLS])
    rows = await conn.fetch("SELECT * FROM akinds ORDER BY id")
    check("round trip", [tuple(r) for r in rows], [ROW, NULLS])

    # executemany is atomic: one pipeline, one implicit transaction.
    again = (3,) + ROW[1:]
    try:
        await insert.executemany([again, ROW])
        raise AssertionError("a duplicate key in executemany was accepted")
    except asyncpg.UniqueViolationError:
        pass
    check("atomic executemany", await conn.fetchval("SELECT count(*) FROM akinds"), 2)

    # Binary COPY of every type.
    await conn.execute("DELETE FROM akinds")
    await conn.copy_records_to_table("akinds", records=[ROW, NULLS], columns=COLUMNS)
    rows = await conn.fetch("SELECT * FROM akinds ORDER BY id")
    check("binary COPY", [tuple(r) for r in rows], [ROW, NULLS])

    # Parameter types come from the statement, as PostgreSQL infers them.
    check("cast parameter", await conn.fetchval("SELECT $1::int + 1", 41), 42)
    # A key the server numbers, read back through RETURNING.
    await conn.execute("DROP TABLE IF EXISTS atickets")
    await conn.execute("CREATE TABLE atickets (id SERIAL PRIMARY KEY, title TEXT)")
    check("serial key", await conn.fetchval("INSERT INTO atickets (title) VALUES ($1) RETURNING id", "a"), 1)
    await conn.executemany("INSERT INTO atickets (title) VALUES ($1)", [("b",), ("c",)])
    check("serial keys", [r["id"] for r in await conn.fetch("SELECT id FROM atickets ORDER BY id")], [1, 2, 3])
    check("currval", await conn.fetchval("SELECT currval('atickets_id_seq')"), 3)
    check("integer literal", await conn.fetchval("SELECT 1"), 1)
    lookup = await conn.prepare("SELECT t FROM akinds WHERE id = $1")
    check("prepared", [await lookup.fetchval(1), await lookup.fetchval(2)], ["héllo", None])

    # Transactions.
    async with conn.transaction():
        await conn.execute("INSERT INTO akinds (id) VALUES (3)")
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO akinds (id) VALUES (4)")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    try:
        await conn.execute("INSERT INTO akinds (id) VALUES (3)")
        raise AssertionError("duplicate key accepted")
    except asyncpg.exceptions.UniqueViolationError:
        pass
    ids = [r["id"] for r in await conn.fetch("SELECT id FROM akinds ORDER BY id")]
    check("after transactions", ids, [1, 2, 3])

    # COPY TO as CSV.
    out = io.BytesIO()
    await conn.copy_from_query("SELECT id, t FROM akinds ORDER BY id", output=out, format="csv")
    check("COPY TO", out.getvalue(), "1,héllo\n2,\n3,\n".encode())

    # Cursors: in pieces, and iterated with prefetch.
    async with conn.transaction():
        cursor = await conn.cursor("SELECT id FROM akinds ORDER BY id")
        check("cursor pieces", [r["id"] for r in await cursor.fetch(2)], [1, 2])
        check("cursor rest", [r["id"] for r in await cursor.fetch(10)], [3])
        seen = [r["id"] async for r in conn.cursor("SELECT id FROM akinds ORDER BY id", prefetch=1)]
        check("cursor iteration", seen, [1, 2, 3])

    # jsonb: text by default, Python values through a codec; binary COPY.
    await conn.execute("DROP TABLE IF EXISTS adocs")
    await conn.execute("CREATE TABLE adocs (id INT PRIMARY KEY, body JSONB)")
    await conn.execute("INSERT INTO adocs VALUES ($1, $2)", 1, '{"b": [1, 2], "a": null}')
    check("jsonb text", await conn.fetchval("SELECT body FROM adocs"), '{"a": null, "b": [1, 2]}')
    await conn.copy_records_to_table("adocs", records=[(2, '{"copied":true}')])
    # A parameter stored in a jsonb column is described as jsonb, so the
    # codec encodes it (in binary, after jsonb's version byte).
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.execute("INSERT INTO adocs VALUES ($1, $2)", 3, {"k": "v"})
    rows = await conn.fetch("SELECT id, body FROM adocs ORDER BY id")
    check("jsonb values", [tuple(r) for r in rows], [(1, {"a": None, "b": [1, 2]}), (2, {"copied": True}), (3, {"k": "v"})])
    check("jsonb operator", await conn.fetchval("SELECT body ->> 'k' FROM adocs WHERE body ? 'k'"), "v")
    await conn.execute("DROP TABLE adocs")

    # Arrays: asyncpg has codecs of its own only for text[] and oid[]; it
    # looks every other array type up in the catalog (a recursive query
    # binding an oid[]) before it sends or reads one.
    await conn.execute("DROP TABLE IF EXISTS aarrays")
    await conn.execute(
        "CREATE TABLE aarrays (id INT PRIMARY KEY, ints INT[], bigs BIGINT[], tags TEXT[], fl DOUBLE PRECISION[])"
    )
    insert = "INSERT INTO aarrays VALUES ($1, $2, $3, $4, $5)"
    await conn.execute(insert, 1, [1, None, 3], [2**40], ["a", None], [1.5])
    await conn.execute(insert, 2, [], None, [], None)
    rows = await conn.fetch("SELECT * FROM aarrays ORDER BY id")
    check("arrays", [tuple(r) for r in rows], [(1, [1, None, 3], [2**40], ["a", None], [1.5]), (2, [], None, [], None)])
    check("= ANY($1)", [r["id"] for r in await conn.fetch("SELECT id FROM aarrays WHERE id = ANY($1) ORDER BY id", [2, 5])], [2])
    check("array parameter", await conn.fetchval("SELECT $1::bigint[]", [1, 2]), [1, 2])
    check("empty ANY", await conn.fetch("SELECT id FROM aarrays WHERE id = ANY($1)", []), [])
    await conn.execute("DROP TABLE aarrays")

    # A materialized view, read after FLUSH.
    await conn.execute("CREATE MATERIALIZED VIEW akinds_n AS SELECT count(*) AS n, sum(b) AS sb FROM akinds")
    await conn.execute("FLUSH")
    check("view", tuple(await conn.fetchrow("SELECT n, sb FROM akinds_n")), (3, decimal.Decimal(9007199254740993)))
    await conn.execute("DROP MATERIALIZED VIEW akinds_n")
    await conn.execute("DROP TABLE akinds")
    await conn.close()
    print("ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
