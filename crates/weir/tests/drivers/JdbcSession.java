// A JDBC session (the PostgreSQL JDBC driver, pgjdbc) against Weir: run as
// `java -cp postgresql.jar JdbcSession.java <jdbc url>`; prints "ok" at the
// end. What it covers is listed in docs/drivers.md.

import java.io.ByteArrayInputStream;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Types;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;
import org.postgresql.util.PGInterval;
import org.postgresql.util.PGobject;

public class JdbcSession {
    static void check(String what, Object got, Object expected) {
        boolean same = (got instanceof byte[] && expected instanceof byte[])
                ? Arrays.equals((byte[]) got, (byte[]) expected)
                : Objects.equals(got, expected);
        if (!same) {
            throw new AssertionError(what + ": got " + got + ", expected " + expected);
        }
    }

    static List<String> column(Connection conn, String sql) throws SQLException {
        List<String> values = new ArrayList<>();
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            while (rs.next()) {
                values.add(rs.getString(1));
            }
        }
        return values;
    }

    /** Every common type through parameters and back, in the formats `conn` uses. */
    static void roundTrip(Connection conn, String mode, int id) throws Exception {
        BigDecimal numeric = new BigDecimal("12345678901234567890.123456789");
        LocalDate date = LocalDate.of(2024, 3, 5);
        LocalTime time = LocalTime.of(10, 11, 12, 500_000_000);
        LocalDateTime timestamp = LocalDateTime.of(2024, 3, 5, 10, 11, 12, 123_456_000);
        OffsetDateTime instant = OffsetDateTime.of(2024, 3, 5, 10, 11, 12, 0, ZoneOffset.ofHours(2));
        byte[] bytes = {0, 1, 2, (byte) 0xfe, (byte) 0xff};
        PGobject json = new PGobject();
        json.setType("jsonb");
        json.setValue("{\"a\": [1, 2, {\"b\": null}]}");
        PGInterval interval = new PGInterval(0, 1, 2, 3, 4, 5.5);
        try (PreparedStatement insert = conn.prepareStatement(
                "INSERT INTO jdbc_types VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
            // Several times, so that pgjdbc switches to a named server-side
            // statement (and binary transfer) where its threshold says so.
            for (int i = 0; i < 3; i++) {
                insert.setInt(1, id + i);
                insert.setShort(2, (short) -32768);
                insert.setLong(3, Long.MAX_VALUE);
                insert.setBigDecimal(4, numeric);
                insert.setFloat(5, 1.5f);
                insert.setDouble(6, -2.25e-300);
                insert.setBoolean(7, true);
                insert.setString(8, "héllo ✓ 'quoted'");
                insert.setString(9, "var");
                insert.setObject(10, date);
                insert.setObject(11, time);
                insert.setObject(12, timestamp);
                insert.setObject(13, instant);
                insert.setBytes(14, bytes);
                insert.setObject(15, json);
                insert.setObject(16, interval);
                insert.setNull(17, Types.INTEGER);
                check(mode + " insert", insert.executeUpdate(), 1);
            }
        }
        try (PreparedStatement select = conn.prepareStatement(
                "SELECT i2, i8, nu, f4, f8, b, t, vc, d, tm, ts, tz, by, js, iv, n FROM jdbc_types WHERE id = ?")) {
            for (int i = 0; i < 3; i++) {
                select.setInt(1, id + i);
                try (ResultSet rs = select.executeQuery()) {
                    check(mode + " row", rs.next(), true);
                    check(mode + " smallint", rs.getShort(1), (short) -32768);
                    check(mode + " bigint", rs.getLong(2), Long.MAX_VALUE);
                    check(mode + " numeric", rs.getBigDecimal(3), numeric);
                    check(mode + " real", rs.getFloat(4), 1.5f);
                    check(mode + " double", rs.getDouble(5), -2.25e-300);
                    check(mode + " boolean", rs.getBoolean(6), true);
                    check(mode + " text", rs.getString(7), "héllo ✓ 'quoted'");
                    check(mode + " varchar", rs.getString(8), "var");
                    check(mode + " date", rs.getObject(9, LocalDate.class), date);
                    check(mode + " time", rs.getObject(10, LocalTime.class), time);
                    check(mode + " timestamp", rs.getObject(11, LocalDateTime.class), timestamp);
                    check(mode + " timestamptz", rs.getObject(12, OffsetDateTime.class).toInstant(), instant.toInstant());
                    check(mode + " bytea", rs.getBytes(13), bytes);
                    check(mode + " jsonb", rs.getString(14), "{\"a\": [1, 2, {\"b\": null}]}");
                    check(mode + " interval", rs.getObject(15, PGInterval.class), interval);
                    rs.getInt(16);
                    check(mode + " null", rs.wasNull(), true);
                    check(mode + " one row", rs.next(), false);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        try (Connection conn = DriverManager.getConnection(url)) {
            try (Statement st = conn.createStatement()) {
                st.execute("DROP MATERIALIZED VIEW IF EXISTS jdbc_totals");
                st.execute("DROP TABLE IF EXISTS jdbc_types");
                st.execute("DROP TABLE IF EXISTS jdbc_orders");
                st.execute("DROP TABLE IF EXISTS jdbc_tickets");
                st.execute("CREATE TABLE jdbc_types (id INT PRIMARY KEY, i2 SMALLINT, i8 BIGINT, nu NUMERIC(38,9), "
                        + "f4 REAL, f8 DOUBLE PRECISION, b BOOLEAN, t TEXT, vc VARCHAR(10), d DATE, tm TIME, "
                        + "ts TIMESTAMP, tz TIMESTAMPTZ, by BYTEA, js JSONB, iv INTERVAL, n INT)");
                st.execute("CREATE TABLE jdbc_orders (id INT PRIMARY KEY, customer TEXT NOT NULL, amount NUMERIC(10,2))");
                st.execute("CREATE TABLE jdbc_tickets (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, title TEXT)");
            }

            // Keys the server numbers, read back as JDBC's generated keys
            // (pgjdbc appends RETURNING to the INSERT), in a batch too.
            try (PreparedStatement insert = conn.prepareStatement(
                    "INSERT INTO jdbc_tickets (title) VALUES (?)", Statement.RETURN_GENERATED_KEYS)) {
                insert.setString(1, "first");
                check("generated insert", insert.executeUpdate(), 1);
                try (ResultSet keys = insert.getGeneratedKeys()) {
                    check("generated key", keys.next() && keys.getLong("id") == 1L, true);
                }
                insert.setString(1, "second");
                insert.addBatch();
                insert.setString(1, "third");
                insert.addBatch();
                insert.executeBatch();
                List<Long> batchKeys = new java.util.ArrayList<>();
                try (ResultSet keys = insert.getGeneratedKeys()) {
                    while (keys.next()) {
                        batchKeys.add(keys.getLong("id"));
                    }
                }
                check("batch keys", batchKeys, List.of(2L, 3L));
            }

            // Literals come back typed as PostgreSQL types them.
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(
                    "SELECT 1, 2147483648, 1.5, 'x', now()")) {
                rs.next();
                check("int4 literal", rs.getMetaData().getColumnType(1), Types.INTEGER);
                check("int8 literal", rs.getMetaData().getColumnType(2), Types.BIGINT);
                check("numeric literal", rs.getMetaData().getColumnType(3), Types.NUMERIC);
                check("text literal", rs.getMetaData().getColumnTypeName(4), "text");
                check("timestamptz", rs.getMetaData().getColumnTypeName(5), "timestamptz");
            }

            // Every type in text (the first executions) and binary
            // (a server-prepared statement) formats.
            roundTrip(conn, "jdbc", 100);
        }
        // A connection that prepares on the server at once, with binary
        // transfer for every type pgjdbc reads in binary.
        try (Connection conn = DriverManager.getConnection(url + "&prepareThreshold=-1&binaryTransfer=true")) {
            roundTrip(conn, "binary", 200);
        }

        try (Connection conn = DriverManager.getConnection(url)) {
            // Transactions: rollback, commit, a savepoint.
            conn.setAutoCommit(false);
            try (PreparedStatement insert = conn.prepareStatement("INSERT INTO jdbc_orders VALUES (?, ?, ?)")) {
                insert.setInt(1, 1);
                insert.setString(2, "ann");
                insert.setBigDecimal(3, new BigDecimal("10.50"));
                insert.executeUpdate();
                conn.rollback();
                check("rolled back", column(conn, "SELECT count(*) FROM jdbc_orders"), List.of("0"));
                insert.executeUpdate();
                Savepoint savepoint = conn.setSavepoint();
                insert.setInt(1, 2);
                insert.executeUpdate();
                conn.rollback(savepoint);
                conn.commit();
                check("committed", column(conn, "SELECT id FROM jdbc_orders"), List.of("1"));
                // A duplicate key is 23505, and the transaction goes on
                // after a rollback.
                try {
                    insert.setInt(1, 1);
                    insert.executeUpdate();
                    throw new AssertionError("duplicate key accepted");
                } catch (SQLException e) {
                    check("duplicate key", e.getSQLState(), "23505");
                }
                conn.rollback();
            }
            conn.setAutoCommit(true);

            // COPY both ways.
            CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
            StringBuilder csv = new StringBuilder();
            for (int i = 2; i <= 11; i++) {
                csv.append(i).append(",customer ").append(i % 3).append(',').append(i).append(".25\n");
            }
            long copied = copy.copyIn("COPY jdbc_orders FROM STDIN WITH (FORMAT csv)",
                    new ByteArrayInputStream(csv.toString().getBytes(StandardCharsets.UTF_8)));
            check("copy in", copied, 10L);
            StringWriter out = new StringWriter();
            long written = copy.copyOut("COPY (SELECT id, amount FROM jdbc_orders WHERE id <= 3 ORDER BY id) TO STDOUT WITH (FORMAT csv)", out);
            check("copy out rows", written, 3L);
            check("copy out", out.toString(), "1,10.50\n2,2.25\n3,3.25\n");

            // A cursor: rows fetched two at a time inside a transaction.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(2);
                try (ResultSet rs = st.executeQuery("SELECT id FROM jdbc_orders ORDER BY id")) {
                    int rows = 0;
                    int last = 0;
                    while (rs.next()) {
                        rows++;
                        last = rs.getInt(1);
                    }
                    check("cursor rows", rows, 11);
                    check("cursor last", last, 11);
                }
            }
            conn.commit();
            conn.setAutoCommit(true);

            // The catalog queries JDBC makes.
            DatabaseMetaData meta = conn.getMetaData();
            check("product", meta.getDatabaseProductName(), "PostgreSQL");
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = meta.getTables(null, "public", "jdbc_%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_NAME"));
                }
            }
            check("tables", tables, List.of("jdbc_orders", "jdbc_tickets", "jdbc_types"));
            List<String> columns = new ArrayList<>();
            try (ResultSet rs = meta.getColumns(null, "public", "jdbc_orders", "%")) {
                while (rs.next()) {
                    columns.add(rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME") + " "
                            + rs.getInt("COLUMN_SIZE") + " " + rs.getString("IS_NULLABLE"));
                }
            }
            check("columns", columns, List.of("id int4 10 NO", "customer text 2147483647 NO", "amount numeric 10 YES"));
            List<String> keys = new ArrayList<>();
            try (ResultSet rs = meta.getPrimaryKeys(null, "public", "jdbc_orders")) {
                while (rs.next()) {
                    keys.add(rs.getString("COLUMN_NAME") + " " + rs.getString("PK_NAME"));
                }
            }
            check("primary key", keys, List.of("id jdbc_orders_pkey"));

            // A materialized view, read after FLUSH.
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE MATERIALIZED VIEW jdbc_totals AS "
                        + "SELECT customer, count(*) AS n, sum(amount) AS total FROM jdbc_orders GROUP BY customer");
                st.execute("INSERT INTO jdbc_orders VALUES (20, 'customer 0', 1.00)");
                st.execute("FLUSH");
            }
            check("view", column(conn, "SELECT n || ' ' || total FROM jdbc_totals WHERE customer = 'customer 0'"),
                    List.of("4 19.75"));
        }
        System.out.println("ok");
    }
}
