"""A psycopg 3 session against Weir: python3 psycopg_session.py DSN.

Every common type round-trips in text and binary, parameters are typed
as psycopg declares them, transactions commit and roll back (savepoints
included), json, jsonb and uuid round-trip as Python values (also through
binary COPY), COPY works both ways in text and binary, a named
(server-side) cursor reads in pieces, the catalog describes the table's
columns and resolves type names (TypeInfo), and a materialized view is
read after FLUSH, and interval parameters arrive in the text forms other
drivers send. Any difference raises; the last
line printed is "ok".
"""

import datetime
import decimal
import sys
import uuid

import psycopg
from psycopg.adapt import Dumper
from psycopg.types import TypeInfo
from psycopg.types.json import Json, Jsonb

ROW = (
    1,
    7,
    9007199254740993,
    1.5,
    2.25,
    decimal.Decimal("12345678901234.123456"),
    "héllo 'quoted' \\ back",
    "v",
    True,
    datetime.date(2024, 3, 5),
    datetime.datetime(2024, 3, 5, 10, 0, 1, 123456),
    datetime.datetime(2024, 3, 5, 10, 0, 1, tzinfo=datetime.timezone.utc),
    datetime.time(10, 1, 2, 500),
    datetime.timedelta(days=1, seconds=5, microseconds=7),
    b"\x00\xff\x10",
)
NULLS = (2,) + (None,) * (len(ROW) - 1)


def check(what, got, expected):
    if got != expected:
        raise AssertionError(f"{what}: got {got!r}, expected {expected!r}")


def main(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("DROP MATERIALIZED VIEW IF EXISTS kinds_n")
        cur.execute("DROP TABLE IF EXISTS kinds")
        cur.execute(
            "CREATE TABLE kinds (id INT PRIMARY KEY, s SMALLINT, b BIGINT, r REAL,"
            " d DOUBLE PRECISION, n NUMERIC(20,6), t TEXT, v VARCHAR(20), bo BOOLEAN,"
            " dt DATE, ts TIMESTAMP, tz TIMESTAMPTZ, tm TIME, iv INTERVAL, by BYTEA)"
        )
        marks = ", ".join(["%s"] * len(ROW))
        for binary in (False, True):
            cur.execute("DELETE FROM kinds")
            cur.executemany(f"INSERT INTO kinds VALUES ({marks})", [ROW, NULLS])
            cur.execute("SELECT * FROM kinds ORDER BY id", binary=binary)
            check(f"round trip (binary={binary})", cur.fetchall(), [ROW, NULLS])

        # json and jsonb, as psycopg adapts them, in text and binary.
        doc = {"name": "x", "tags": ["a", "b"], "n": 1.5, "nested": {"ok": True, "none": None}}
        cur.execute("DROP TABLE IF EXISTS docs")
        cur.execute("CREATE TABLE docs (id INT PRIMARY KEY, body JSONB, raw JSON)")
        cur.execute("INSERT INTO docs VALUES (%s, %s, %s)", (1, Jsonb(doc), Json([1, "two"])))
        with cur.copy("COPY docs FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "jsonb", "json"])
            copy.write_row((2, Jsonb({"copied": [1]}), Json({})))
        for binary in (False, True):
            cur.execute("SELECT id, body, raw FROM docs ORDER BY id", binary=binary)
            check(
                f"json round trip (binary={binary})",
                cur.fetchall(),
                [(1, doc, [1, "two"]), (2, {"copied": [1]}, {})],
            )
        cur.execute("SELECT body ->> 'name', body @> %s FROM docs WHERE id = 1", (Jsonb({"tags": ["b"]}),))
        check("json operators", cur.fetchone(), ("x", True))
        cur.execute("DROP TABLE docs")

        # uuid as psycopg adapts uuid.UUID: in text and binary, as a
        # parameter compared with a uuid column, through binary COPY both
        # ways, and gen_random_uuid().
        key = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        cur.execute("DROP TABLE IF EXISTS things")
        cur.execute("CREATE TABLE things (id UUID PRIMARY KEY, n INT)")
        cur.execute("INSERT INTO things VALUES (%s, %s)", (key, 1))
        cur.execute("INSERT INTO things VALUES (gen_random_uuid(), 2)")
        with cur.copy("COPY things FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["uuid", "int4"])
            copy.write_row((uuid.UUID(int=7), 3))
        for binary in (False, True):
            cur.execute("SELECT id, n FROM things WHERE id = %s", (key,), binary=binary)
            check(f"uuid parameter (binary={binary})", cur.fetchall(), [(key, 1)])
            cur.execute("SELECT id FROM things WHERE n = 3", binary=binary)
            check(f"uuid from binary COPY (binary={binary})", cur.fetchall(), [(uuid.UUID(int=7),)])
            cur.execute("SELECT id, pg_typeof(id)::text FROM things WHERE n = 2", binary=binary)
            random_id, type_name = cur.fetchone()
            check(f"gen_random_uuid (binary={binary})", (random_id.version, type_name), (4, "uuid"))
        rows = []
        with cur.copy("COPY (SELECT id FROM things WHERE n = 1) TO STDOUT (FORMAT BINARY)") as copy:
            copy.set_types(["uuid"])
            rows.extend(copy.rows())
        check("uuid through binary COPY TO", rows, [(key,)])
        check("binary COPY TO's row count", cur.rowcount, 1)
        cur.execute("DROP TABLE things")

        # Parameters are typed as psycopg declares them.
        cur.execute("SELECT %s::int + 1, %s, %s", (41, 5, datetime.date(2024, 1, 2)))
        check("declared parameters", cur.fetchone(), (42, 5, datetime.date(2024, 1, 2)))
        cur.execute("SELECT 1, 2147483648, sum(b), avg(s) FROM kinds")
        check("result types", cur.fetchone(), (1, 2147483648, 9007199254740993, decimal.Decimal("7.0000000000")))

        # psycopg's statement cache: every query prepared, at most two kept,
        # the ones it drops deallocated by name (DEALLOCATE _pg3_N).
        conn.prepare_threshold, conn.prepared_max = 0, 2
        for round_ in range(3):
            for k in range(4):
                cur.execute(f"SELECT %s::int + {k}", (round_,))
                check("cached statements", cur.fetchone(), (round_ + k,))
        conn.prepare_threshold, conn.prepared_max = 5, 100
        # DEALLOCATE ALL and DISCARD ALL drop the protocol's statements too.
        for drop in (b"DEALLOCATE ALL", b"DISCARD ALL"):
            check("prepare", conn.pgconn.prepare(b"kept", b"SELECT 1").status, psycopg.pq.ExecStatus.COMMAND_OK)
            check(drop.decode(), conn.pgconn.exec_(drop).status, psycopg.pq.ExecStatus.COMMAND_OK)
            gone = conn.pgconn.exec_prepared(b"kept", [])
            check(f"after {drop.decode()}", gone.error_field(psycopg.pq.DiagnosticField.SQLSTATE), b"26000")

        # Transactions: commit, rollback, a savepoint that fails.
        cur.execute("DELETE FROM kinds WHERE id > 1")
        with conn.transaction():
            cur.execute("INSERT INTO kinds (id) VALUES (2)")
            try:
                with conn.transaction():
                    cur.execute("INSERT INTO kinds (id) VALUES (2)")
                raise AssertionError("duplicate key accepted")
            except psycopg.errors.UniqueViolation:
                pass
        try:
            with conn.transaction():
                cur.execute("INSERT INTO kinds (id) VALUES (3)")
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        cur.execute("SELECT id FROM kinds ORDER BY id")
        check("after transactions", cur.fetchall(), [(1,), (2,)])

        # COPY both ways, text and binary.
        with cur.copy("COPY kinds (id, t, n) FROM STDIN") as copy:
            copy.write_row((10, "a\tb", decimal.Decimal("1.5")))
            copy.write_row((11, None, None))
        with cur.copy("COPY kinds (id, t, n) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "text", "numeric"])
            copy.write_row((12, "bin", decimal.Decimal("-2.25")))
        with cur.copy("COPY (SELECT id, t, n FROM kinds WHERE id >= 10 ORDER BY id) TO STDOUT") as copy:
            copy.set_types(["int4", "text", "numeric"])
            check(
                "COPY TO",
                list(copy.rows()),
                [
                    (10, "a\tb", decimal.Decimal("1.500000")),
                    (11, None, None),
                    (12, "bin", decimal.Decimal("-2.250000")),
                ],
            )

        # A named cursor reads in pieces inside a transaction.
        with conn.transaction():
            with conn.cursor(name="pieces") as named:
                named.itersize = 2
                named.execute("SELECT id FROM kinds ORDER BY id")
                check("named cursor", [r[0] for r in named], [1, 2, 10, 11, 12])

        # The catalog as psycopg reads it for a table's columns.
        cur.execute(
            "SELECT a.attname, t.typname FROM pg_catalog.pg_attribute a"
            " JOIN pg_catalog.pg_class c ON a.attrelid = c.oid"
            " JOIN pg_catalog.pg_type t ON a.atttypid = t.oid"
            " WHERE c.relname = %s AND a.attnum > 0 ORDER BY a.attnum",
            ("kinds",),
        )
        check("catalog", cur.fetchall()[:3], [("id", "int4"), ("s", "int2"), ("b", "int8")])

        # The lookup behind psycopg's adapters for named types.
        info = TypeInfo.fetch(conn, "numeric")
        check("TypeInfo", (info.oid, info.array_oid), (1700, 1231))
        check("TypeInfo of an SQL spelling", TypeInfo.fetch(conn, "double precision").oid, 701)

        # A materialized view, read after FLUSH.
        cur.execute("CREATE MATERIALIZED VIEW kinds_n AS SELECT count(*) AS n, sum(b) AS sb FROM kinds")
        cur.execute("INSERT INTO kinds (id, b) VALUES (20, 5)")
        cur.execute("FLUSH")
        cur.execute("SELECT n, sb FROM kinds_n")
        check("view", cur.fetchone(), (6, decimal.Decimal(9007199254740998)))
        cur.execute("DROP MATERIALIZED VIEW kinds_n")
        cur.execute("DROP TABLE kinds")

    # Interval parameters sent as text in the forms other drivers send
    # (pg8000: "1 days 43260 seconds 0 microseconds"), typed interval.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.adapters.register_dumper(str, IntervalText)
        for text, expected in [
            ("1 days 43260 seconds 0 microseconds", datetime.timedelta(days=1, seconds=43260)),
            ("04:05:06", datetime.timedelta(hours=4, minutes=5, seconds=6)),
            ("@ 2 hours ago", datetime.timedelta(hours=-2)),
        ]:
            got = conn.execute("SELECT %s", [text]).fetchone()[0]
            check(f"interval parameter {text!r}", got, expected)
    print("ok")


class IntervalText(Dumper):
    """Sends a str as a text-format parameter of type interval."""

    oid = 1186

    def dump(self, obj):
        return obj.encode()


if __name__ == "__main__":
    main(sys.argv[1])
