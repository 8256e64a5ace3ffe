//! The extended query protocol through tokio-postgres: parameters,
//! prepared statements, binary formats with the right type OIDs, errors,
//! portals, COPY and cancel.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use futures::SinkExt;
use tokio_postgres::types::Type;
use tokio_postgres::NoTls;

use crate::common::{column, counter, http_get, sqlstate, TestServer};

#[tokio::test]
async fn parameters_and_prepared_statements() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, name TEXT, score DOUBLE PRECISION)")
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO t (id, name, score) VALUES ($1, $2, $3)")
        .await
        .unwrap();
    assert_eq!(insert.params(), &[Type::INT4, Type::TEXT, Type::FLOAT8]);
    for i in 0..5i32 {
        let n = client
            .execute(&insert, &[&i, &format!("n{i}"), &(i as f64 * 1.5)])
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    let select = client
        .prepare("SELECT name, score FROM t WHERE id = $1")
        .await
        .unwrap();
    assert_eq!(select.params(), &[Type::INT4]);
    assert_eq!(select.columns()[0].type_(), &Type::TEXT);
    assert_eq!(select.columns()[1].type_(), &Type::FLOAT8);
    for i in 0..5i32 {
        let row = client.query_one(&select, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), format!("n{i}"));
        assert_eq!(row.get::<_, f64>(1), i as f64 * 1.5);
    }
    let updated = client
        .execute(
            "UPDATE t SET score = score + $1 WHERE id >= $2",
            &[&10.0f64, &3i32],
        )
        .await
        .unwrap();
    assert_eq!(updated, 2);
    let deleted = client
        .execute("DELETE FROM t WHERE name = $1", &[&"n0"])
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let rows = client
        .query("SELECT id FROM t WHERE score > $1 ORDER BY id", &[&10.0f64])
        .await
        .unwrap();
    let ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, vec![3, 4]);
    let err = client
        .execute(&insert, &[&1i32, &"dup", &0.0f64])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "23505");
}

/// Statements without result columns are described with NoData (pgjdbc
/// takes a RowDescription of none for a query), those with a RETURNING list
/// with its columns; a prepared query whose table changed type under it is
/// refused (0A000), as PostgreSQL refuses it, rather than sending rows the
/// client would read with the old types.
#[tokio::test]
async fn described_results_match_the_rows() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE d (id INT PRIMARY KEY, v SMALLINT)")
        .await
        .unwrap();
    let insert = client
        .prepare("INSERT INTO d VALUES ($1, $2)")
        .await
        .unwrap();
    assert!(insert.columns().is_empty());
    let returning = client
        .prepare("INSERT INTO d VALUES ($1, $2) RETURNING v, id * 2 AS twice")
        .await
        .unwrap();
    let described: Vec<_> = returning
        .columns()
        .iter()
        .map(|c| (c.name().to_owned(), c.type_().clone()))
        .collect();
    assert_eq!(
        described,
        vec![("v".into(), Type::INT2), ("twice".into(), Type::INT4)]
    );
    let row = client.query_one(&returning, &[&7i32, &3i16]).await.unwrap();
    assert_eq!((row.get::<_, i16>(0), row.get::<_, i32>(1)), (3, 14));

    let select = client.prepare("SELECT v FROM d").await.unwrap();
    assert_eq!(select.columns()[0].type_(), &Type::INT2);
    client
        .batch_execute("DROP TABLE d; CREATE TABLE d (id INT PRIMARY KEY, v BIGINT)")
        .await
        .unwrap();
    let error = client.query(&select, &[]).await.unwrap_err();
    assert_eq!(error.code().unwrap().code(), "0A000", "{error}");
    // Prepared again, it reads the new type.
    client
        .execute("INSERT INTO d VALUES (1, 5)", &[])
        .await
        .unwrap();
    let select = client.prepare("SELECT v FROM d").await.unwrap();
    let row = client.query_one(&select, &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 5);
}

#[tokio::test]
async fn every_type_round_trips_in_binary() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE all_types (
                b BOOLEAN, i2 SMALLINT, i4 INTEGER, i8 BIGINT, f4 REAL, f8 DOUBLE PRECISION,
                txt TEXT, vc VARCHAR(20), bin BYTEA, d DATE, tm TIME, ts TIMESTAMP,
                tstz TIMESTAMPTZ, n NUMERIC(10,2), iv INTERVAL)",
        )
        .await
        .unwrap();
    let date = NaiveDate::from_ymd_opt(2024, 2, 29).unwrap();
    let time = NaiveTime::from_hms_micro_opt(13, 14, 15, 123456).unwrap();
    let ts = NaiveDateTime::new(date, time);
    let tstz = Utc.from_utc_datetime(&ts);
    let bytes: Vec<u8> = vec![0, 1, 2, 255];
    client
        .execute(
            "INSERT INTO all_types (b, i2, i4, i8, f4, f8, txt, vc, bin, d, tm, ts, tstz, n, iv)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 12345.67, INTERVAL '1 day 2 hours')",
            &[
                &true, &-7i16, &123456i32, &-9_000_000_000i64, &1.5f32, &2.25f64, &"héllo",
                &"short", &bytes, &date, &time, &ts, &tstz,
            ],
        )
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT b, i2, i4, i8, f4, f8, txt, vc, bin, d, tm, ts, tstz, n, iv FROM all_types",
            &[],
        )
        .await
        .unwrap();
    let types: Vec<&Type> = row.columns().iter().map(|c| c.type_()).collect();
    assert_eq!(
        types,
        vec![
            &Type::BOOL,
            &Type::INT2,
            &Type::INT4,
            &Type::INT8,
            &Type::FLOAT4,
            &Type::FLOAT8,
            &Type::TEXT,
            &Type::VARCHAR,
            &Type::BYTEA,
            &Type::DATE,
            &Type::TIME,
            &Type::TIMESTAMP,
            &Type::TIMESTAMPTZ,
            &Type::NUMERIC,
            &Type::INTERVAL,
        ]
    );
    assert!(row.get::<_, bool>(0));
    assert_eq!(row.get::<_, i16>(1), -7);
    assert_eq!(row.get::<_, i32>(2), 123456);
    assert_eq!(row.get::<_, i64>(3), -9_000_000_000);
    assert_eq!(row.get::<_, f32>(4), 1.5);
    assert_eq!(row.get::<_, f64>(5), 2.25);
    assert_eq!(row.get::<_, String>(6), "héllo");
    assert_eq!(row.get::<_, String>(7), "short");
    assert_eq!(row.get::<_, Vec<u8>>(8), bytes);
    assert_eq!(row.get::<_, NaiveDate>(9), date);
    assert_eq!(row.get::<_, NaiveTime>(10), time);
    assert_eq!(row.get::<_, NaiveDateTime>(11), ts);
    assert_eq!(row.get::<_, chrono::DateTime<Utc>>(12), tstz);
    // NUMERIC and INTERVAL have no binary decoder in tokio-postgres: check
    // their text form, which the simple protocol sends.
    let text = client
        .simple_query("SELECT n, iv FROM all_types")
        .await
        .unwrap();
    let tokio_postgres::SimpleQueryMessage::Row(r) = &text[1] else {
        panic!("expected a row, got {:?}", text.len())
    };
    assert_eq!(r.get(0), Some("12345.67"));
    assert_eq!(r.get(1), Some("1 day 02:00:00"));
    // NULLs of every type.
    client
        .execute("INSERT INTO all_types (i4) VALUES (NULL)", &[])
        .await
        .unwrap();
    let row = client
        .query_one(
            "SELECT b, i8, txt, bin, d, ts FROM all_types WHERE i4 IS NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<bool>>(0), None);
    assert_eq!(row.get::<_, Option<i64>>(1), None);
    assert_eq!(row.get::<_, Option<String>>(2), None);
    assert_eq!(row.get::<_, Option<Vec<u8>>>(3), None);
    assert_eq!(row.get::<_, Option<NaiveDate>>(4), None);
    assert_eq!(row.get::<_, Option<NaiveDateTime>>(5), None);
}

#[tokio::test]
async fn errors_carry_sqlstates_on_both_protocols() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
        .await
        .unwrap();
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nope", "42P01"),
        ("SELECT nope FROM t", "42703"),
        ("SELECT 1 / 0", "22012"),
        ("INSERT INTO t VALUES (1, NULL)", "23502"),
        ("INSERT INTO t VALUES (TRUE, 1)", "42804"),
        ("CREATE MATERIALIZED VIEW mv AS SELECT random()", "0A000"),
    ];
    for (sql, code) in cases {
        assert_eq!(sqlstate(&client, sql).await, code, "simple: {sql}");
        let err = client.query(sql, &[]).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some(code), "extended: {sql}");
    }
    client
        .execute("INSERT INTO t VALUES (1, 1)", &[])
        .await
        .unwrap();
    assert_eq!(
        sqlstate(&client, "INSERT INTO t VALUES (1, 2)").await,
        "23505"
    );
    // The connection is still usable after every error.
    let row = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
}

#[tokio::test]
async fn portals_return_rows_in_pieces() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client
        .batch_execute("CREATE TABLE n (x INT); INSERT INTO n SELECT * FROM generate_series(1, 10)")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tx = client.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT x FROM n ORDER BY x").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let rows = tx.query_portal(&portal, 4).await.unwrap();
        if rows.is_empty() {
            break;
        }
        assert!(rows.len() <= 4);
        seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    tx.commit().await.unwrap();
}

/// A result far larger than the query memory streams to the client as it
/// is produced: through a simple query, through a portal read in pieces,
/// and as COPY TO; the server's memory does not grow with the result.
#[tokio::test]
async fn results_stream_in_bounded_memory() {
    use futures::{StreamExt, TryStreamExt};
    let server = TestServer::start_with(&["--query-memory-mb", "16"]).await;
    let mut client = server.client().await;
    // 2 million rows of about 40 bytes: some 80 MB as Arrow arrays, more
    // as encoded rows, five times the query memory.
    let rows = 2_000_000u64;
    let query = format!(
        "SELECT g, g * 2 AS twice, 'row number ' || g AS label \
         FROM generate_series(1, {rows}) AS g"
    );
    let before = server.peak_memory_kib();

    let stream = client.simple_query_raw(&query).await.unwrap();
    let mut seen = 0u64;
    let mut sum = 0u64;
    futures::pin_mut!(stream);
    while let Some(message) = stream.next().await {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message.unwrap() {
            seen += 1;
            sum += row.get(0).unwrap().parse::<u64>().unwrap();
        }
    }
    assert_eq!(seen, rows);
    assert_eq!(sum, rows * (rows + 1) / 2);

    // A portal read 100,000 rows at a time, inside a transaction.
    let tx = client.transaction().await.unwrap();
    let statement = tx.prepare(&query).await.unwrap();
    let portal = tx.bind(&statement, &[]).await.unwrap();
    let mut pieces = 0;
    let mut seen = 0u64;
    loop {
        let piece = tx.query_portal(&portal, 100_000).await.unwrap();
        if piece.is_empty() {
            break;
        }
        pieces += 1;
        seen += piece.len() as u64;
    }
    assert_eq!((pieces, seen), (20, rows));
    tx.commit().await.unwrap();

    let copy = client
        .copy_out(&format!("COPY ({query}) TO STDOUT"))
        .await
        .unwrap();
    let bytes = copy
        .try_fold(0usize, |n, chunk| async move { Ok(n + chunk.len()) })
        .await
        .unwrap();
    assert!(bytes > 60_000_000, "{bytes} bytes copied");

    let grown_mib = (server.peak_memory_kib() - before) / 1024;
    eprintln!("peak memory grew by {grown_mib} MiB while streaming");
    assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB");
    // An error among the rows ends them with its SQLSTATE, and the session
    // goes on.
    let failing = "SELECT 10 / (100000 - g) FROM generate_series(1, 200000) AS g";
    let error = client.simple_query(failing).await.unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012");
    assert_eq!(column(&client, "SELECT 1").await, vec![Some("1".into())]);
}

/// A cursor over a result far larger than the query memory reads it
/// forward in bounded memory; after that it cannot move back (55000), and
/// a SCROLL cursor, which keeps its rows, fails with 54000 instead.
#[tokio::test]
async fn cursors_read_large_results_forward() {
    let server = TestServer::start_with(&["--query-memory-mb", "16"]).await;
    let client = server.client().await;
    let rows = 1_000_000u64;
    let query = format!(
        "SELECT g, 'row number ' || g AS label FROM generate_series(1, {rows}) AS g ORDER BY g"
    );
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute(&format!("DECLARE big CURSOR FOR {query}"))
        .await
        .unwrap();
    let mut seen = 0u64;
    let mut last = 0u64;
    loop {
        let piece = client.query("FETCH 50000 FROM big", &[]).await.unwrap();
        if piece.is_empty() {
            break;
        }
        for row in &piece {
            let value: i32 = row.get(0);
            assert_eq!(value as u64, last + 1, "rows in order, none skipped");
            last = value as u64;
        }
        seen += piece.len() as u64;
    }
    assert_eq!(seen, rows);
    assert_eq!(sqlstate(&client, "FETCH PRIOR FROM big").await, "55000");
    client.batch_execute("ROLLBACK; BEGIN").await.unwrap();
    client
        .batch_execute(&format!("DECLARE back SCROLL CURSOR FOR {query}"))
        .await
        .unwrap();
    assert_eq!(sqlstate(&client, "FETCH LAST FROM back").await, "54000");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(column(&client, "SELECT 1").await, vec![Some("1".into())]);
}

/// A statement timeout also ends rows that stream slowly, and an error
/// among streamed rows fails the transaction block like any error.
#[tokio::test]
async fn streamed_rows_obey_the_timeout_and_fail_the_block() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    // The first rows come at once; all of them would take minutes.
    let slow = "SELECT g FROM generate_series(1, 1000000000) AS g";
    let error = client.simple_query(slow).await.unwrap_err();
    assert_eq!(error.code().unwrap().code(), "57014");
    client
        .batch_execute("RESET statement_timeout")
        .await
        .unwrap();

    client.batch_execute("BEGIN").await.unwrap();
    let failing = "SELECT 10 / (100000 - g) FROM generate_series(1, 200000) AS g";
    let error = client.simple_query(failing).await.unwrap_err();
    assert_eq!(error.code().unwrap().code(), "22012");
    assert_eq!(sqlstate(&client, "SELECT 1").await, "25P02");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(column(&client, "SELECT 2").await, vec![Some("2".into())]);
}

#[tokio::test]
async fn copy_in_through_the_protocol() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE c (id INT PRIMARY KEY, name TEXT, d DATE)")
        .await
        .unwrap();
    let sink = client
        .copy_in("COPY c (id, name, d) FROM STDIN")
        .await
        .unwrap();
    let mut data = String::new();
    for i in 0..1000 {
        data.push_str(&format!("{i}\tname {i}\t2024-01-{:02}\n", i % 28 + 1));
    }
    data.push_str("1000\t\\N\t\\N\n");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data)).await.unwrap();
    let n = sink.finish().await.unwrap();
    assert_eq!(n, 1001);
    let row = client
        .query_one("SELECT count(*), count(name), max(d) FROM c", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1001);
    assert_eq!(row.get::<_, i64>(1), 1000);
    assert_eq!(
        row.get::<_, NaiveDate>(2),
        NaiveDate::from_ymd_opt(2024, 1, 28).unwrap()
    );
    // Bad data fails the whole COPY and leaves the table as it was.
    let sink = client.copy_in("COPY c FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(
        "5000\tx\t2024-01-01\nnot-a-number\ty\t2024-01-01\n",
    ))
    .await
    .unwrap();
    let err = sink.finish().await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22P02"));
    let row = client
        .query_one("SELECT count(*) FROM c", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1001);
}

#[tokio::test]
async fn cancel_stops_a_long_query() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE big (x BIGINT); INSERT INTO big SELECT * FROM generate_series(1, 3000)",
        )
        .await
        .unwrap();
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let started = std::time::Instant::now();
    let err = client
        .simple_query("SELECT count(*) FROM big a, big b, big c WHERE a.x + b.x + c.x = 7")
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The session goes on.
    let row = client
        .query_one("SELECT count(*) FROM big", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3000);
}

#[tokio::test]
async fn transactions_are_accepted_and_reads_see_one_snapshot() {
    let server = TestServer::start().await;
    let mut reader = server.client().await;
    let writer = server.client().await;
    writer
        .batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let tx = reader.transaction().await.unwrap();
    let before: i64 = tx
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    writer
        .execute("INSERT INTO t VALUES (2)", &[])
        .await
        .unwrap();
    let inside: i64 = tx
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(before, inside, "a transaction reads one snapshot");
    tx.commit().await.unwrap();
    let after: i64 = reader
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, 2);
    reader.batch_execute("BEGIN; ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn password_authentication_with_scram() {
    let server = TestServer::start_with(&["--password", "s3cret"]).await;
    let good = format!(
        "host=127.0.0.1 port={} user=weir password=s3cret dbname=weir",
        server.addr.port()
    );
    let (client, conn) = tokio_postgres::connect(&good, NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(
        client
            .query_one("SELECT 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );
    let bad = format!(
        "host=127.0.0.1 port={} user=weir password=wrong dbname=weir",
        server.addr.port()
    );
    let Err(err) = tokio_postgres::connect(&bad, NoTls).await else {
        panic!("a wrong password must be refused");
    };
    assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err}");
    let nopass = format!(
        "host=127.0.0.1 port={} user=weir dbname=weir",
        server.addr.port()
    );
    assert!(tokio_postgres::connect(&nopass, NoTls).await.is_err());
}

#[tokio::test]
async fn result_columns_have_postgres_names() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (x INT, y TEXT); INSERT INTO t VALUES (1, 'a')")
        .await
        .unwrap();
    let sql = "SELECT count(*), max(x) AS m, 1, t.y, x + 1, upper(y) FROM t GROUP BY t.y, x";
    let names = |columns: &[tokio_postgres::Column]| -> Vec<String> {
        columns.iter().map(|c| c.name().to_owned()).collect()
    };
    let expected = vec!["count", "m", "?column?", "y", "?column?", "upper"];
    let stmt = client.prepare(sql).await.unwrap();
    assert_eq!(names(stmt.columns()), expected);
    let messages = client.simple_query(sql).await.unwrap();
    let tokio_postgres::SimpleQueryMessage::RowDescription(columns) = &messages[0] else {
        panic!("expected a row description first");
    };
    let simple: Vec<&str> = columns.iter().map(|c| c.name()).collect();
    assert_eq!(simple, expected);
}

#[tokio::test]
async fn prometheus_metrics_over_http() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let server = TestServer::start_with(&["--metrics-listen", &address]).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE m (x INT);
             CREATE MATERIALIZED VIEW m_count AS SELECT count(*) AS n FROM m;
             INSERT INTO m VALUES (1), (2); CHECKPOINT",
        )
        .await
        .unwrap();
    let page = http_get(port, "/metrics");
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("weir_table_rows{table=\"m\"} 2"), "{page}");
    // Rows into the view: the two inserted; out: its old row and new one.
    assert!(
        page.contains("weir_view_rows_in_total{view=\"m_count\"} 2"),
        "{page}"
    );
    assert!(
        page.contains("weir_view_rows_out_total{view=\"m_count\"} 2"),
        "{page}"
    );
    let epoch: u64 = page
        .lines()
        .find_map(|l| l.strip_prefix("weir_committed_epoch "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{page}"));
    assert!(epoch >= 3, "{page}");
    for name in [
        "weir_epoch_lag",
        "weir_epochs_committed_total",
        "weir_objects_written_total",
        "weir_bytes_written_total",
        "weir_checkpoint_duration_seconds",
    ] {
        assert!(
            page.contains(&format!("# TYPE {name} ")),
            "{name} missing: {page}"
        );
    }
    assert!(http_get(port, "/other").starts_with("HTTP/1.1 404"));

    // Rows behind a view's watermark are dropped and counted per view.
    client
        .batch_execute(
            "CREATE TABLE bids (price INT, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY;
             CREATE MATERIALIZED VIEW per_window AS \
                 SELECT window_start, count(*) AS n FROM TUMBLE(bids, ts, INTERVAL '10' SECOND) \
                 GROUP BY window_start;
             INSERT INTO bids VALUES (1, '2024-01-01 00:00:30'); CHECKPOINT;
             INSERT INTO bids VALUES (2, '2024-01-01 00:00:05'), (3, '2024-01-01 00:00:29'); \
             CHECKPOINT",
        )
        .await
        .unwrap();
    let page = http_get(port, "/metrics");
    assert!(
        page.contains("weir_view_late_rows_total{view=\"per_window\"} 1"),
        "{page}"
    );
    assert!(
        page.contains("weir_view_late_rows_total{view=\"m_count\"} 0"),
        "{page}"
    );
}

/// A bare-bones frontend that shows what tokio-postgres hides: the
/// transaction status byte of each ReadyForQuery.
struct Frontend {
    stream: std::net::TcpStream,
}

impl Frontend {
    fn connect(server: &TestServer) -> Frontend {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        stream.write_all(&crate::common::startup_packet()).unwrap();
        let mut frontend = Frontend { stream };
        frontend.until_ready();
        frontend
    }

    fn send(&mut self, tag: u8, body: &[u8]) {
        use std::io::Write;
        let mut message = vec![tag];
        message.extend(((body.len() + 4) as u32).to_be_bytes());
        message.extend_from_slice(body);
        self.stream.write_all(&message).unwrap();
    }

    /// Reads messages up to and with ReadyForQuery, as (tag, body).
    fn messages_until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        use std::io::Read;
        let mut messages = Vec::new();
        loop {
            let mut head = [0u8; 5];
            self.stream.read_exact(&mut head).unwrap();
            let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize - 4;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).unwrap();
            messages.push((head[0], body));
            if head[0] == b'Z' {
                return messages;
            }
        }
    }

    /// Reads messages up to ReadyForQuery: the SQLSTATEs of the errors
    /// among them and the status byte.
    fn until_ready(&mut self) -> (Vec<String>, char) {
        let mut errors = Vec::new();
        let mut status = ' ';
        for (tag, body) in self.messages_until_ready() {
            match tag {
                b'Z' => status = body[0] as char,
                b'E' => {
                    let fields = body.split(|&b| b == 0);
                    let code = fields
                        .filter_map(|f| f.strip_prefix(b"C"))
                        .next()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .unwrap_or_default();
                    errors.push(code);
                }
                _ => {}
            }
        }
        (errors, status)
    }

    /// Describe of portal `name` and Sync: the (name, type oid, format)
    /// of each column of the RowDescription, if one came.
    fn describe_portal(&mut self, name: &str) -> Option<Vec<(String, u32, i16)>> {
        let mut body = vec![b'P'];
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        self.send(b'D', &body);
        self.send(b'S', &[]);
        let messages = self.messages_until_ready();
        let (_, body) = messages.into_iter().find(|(tag, _)| *tag == b'T')?;
        let count = i16::from_be_bytes([body[0], body[1]]) as usize;
        let mut at = 2;
        let mut columns = Vec::new();
        for _ in 0..count {
            let end = at + body[at..].iter().position(|&b| b == 0).unwrap();
            let name = String::from_utf8_lossy(&body[at..end]).into_owned();
            let field = &body[end + 1..end + 19];
            let oid = u32::from_be_bytes(field[6..10].try_into().unwrap());
            let format = i16::from_be_bytes(field[16..18].try_into().unwrap());
            columns.push((name, oid, format));
            at = end + 19;
        }
        Some(columns)
    }

    /// A simple Query: its errors' SQLSTATEs and the status after it.
    fn query(&mut self, sql: &str) -> (Vec<String>, char) {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.send(b'Q', &body);
        self.until_ready()
    }

    /// Parse, Bind, Execute and Sync of a statement with one parameter of
    /// type `oid`, sent as `text`.
    fn execute_text(&mut self, sql: &str, oid: u32, text: &str) -> (Vec<String>, char) {
        let mut parse = vec![0u8];
        parse.extend_from_slice(sql.as_bytes());
        parse.push(0);
        parse.extend(1i16.to_be_bytes());
        parse.extend(oid.to_be_bytes());
        self.send(b'P', &parse);
        let mut bind = vec![0u8, 0];
        bind.extend(0i16.to_be_bytes()); // every parameter in text
        bind.extend(1i16.to_be_bytes());
        bind.extend((text.len() as i32).to_be_bytes());
        bind.extend_from_slice(text.as_bytes());
        bind.extend(0i16.to_be_bytes());
        self.send(b'B', &bind);
        self.send(b'E', &[0, 0, 0, 0, 0]);
        self.send(b'S', &[]);
        self.until_ready()
    }

    /// Parse, Bind and Execute of each statement (no parameters), then
    /// one Sync: a pipeline.
    fn pipeline(&mut self, statements: &[&str]) -> (Vec<String>, char) {
        for sql in statements {
            let mut parse = vec![0u8];
            parse.extend_from_slice(sql.as_bytes());
            parse.extend([0, 0, 0]);
            self.send(b'P', &parse);
            self.send(b'B', &[0, 0, 0, 0, 0, 0, 0, 0]);
            self.send(b'E', &[0, 0, 0, 0, 0]);
        }
        self.send(b'S', &[]);
        self.until_ready()
    }

    /// Parse, Bind, Execute and Sync of one statement without parameters.
    fn execute(&mut self, sql: &str) -> (Vec<String>, char) {
        self.pipeline(&[sql])
    }
}

#[tokio::test]
async fn ready_for_query_reports_the_transaction_status() {
    let server = TestServer::start().await;
    let other = server.client().await;
    other
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1)")
        .await
        .unwrap();
    let mut raw = Frontend::connect(&server);
    let ok = |status: char| (Vec::<String>::new(), status);
    let failed = |code: &str, status: char| (vec![code.to_owned()], status);
    assert_eq!(raw.query("BEGIN"), ok('T'));
    assert_eq!(raw.query("SAVEPOINT a"), ok('T'));
    assert_eq!(raw.query("SELECT * FROM missing"), failed("42P01", 'E'));
    assert_eq!(raw.query("SELECT 1"), failed("25P02", 'E'));
    assert_eq!(raw.query("ROLLBACK TO a"), ok('T'));
    assert_eq!(raw.query("COMMIT"), ok('I'));

    // The extended protocol: an error fails the block until ROLLBACK.
    assert_eq!(raw.query("BEGIN"), ok('T'));
    assert_eq!(raw.execute("UPDATE t SET v = 2 WHERE id = 1"), ok('T'));
    assert_eq!(raw.execute("SELECT * FROM missing"), failed("42P01", 'E'));
    assert_eq!(raw.execute("SELECT 1"), failed("25P02", 'E'));
    assert_eq!(raw.query("COMMIT"), ok('I'));
    assert_eq!(
        crate::common::column(&other, "SELECT v FROM t").await,
        vec![Some("1".into())],
        "COMMIT of a failed block rolls back"
    );

    // A COMMIT that loses a conflict ends the block.
    assert_eq!(raw.query("BEGIN"), ok('T'));
    assert_eq!(raw.query("UPDATE t SET v = 3 WHERE id = 1"), ok('T'));
    other
        .batch_execute("UPDATE t SET v = 4 WHERE id = 1")
        .await
        .unwrap();
    assert_eq!(raw.query("COMMIT"), failed("40001", 'I'));
    assert_eq!(raw.execute("SELECT v FROM t"), ok('I'));

    // An implicit block around a multi-statement query that fails.
    assert_eq!(
        raw.query("INSERT INTO t VALUES (5, 5); SELECT * FROM missing"),
        failed("42P01", 'I')
    );
    assert_eq!(
        crate::common::column(&other, "SELECT count(*) FROM t").await,
        vec![Some("1".into())]
    );
}

#[tokio::test]
async fn a_pipeline_of_executes_is_one_transaction() {
    let server = TestServer::start().await;
    let other = server.client().await;
    other
        .batch_execute(
            "CREATE TABLE p (id INT PRIMARY KEY, v INT); \
             CREATE MATERIALIZED VIEW p_total AS SELECT count(*) AS n, sum(v) AS s FROM p",
        )
        .await
        .unwrap();
    let count = || async {
        crate::common::column(&other, "SELECT count(*) FROM p").await[0]
            .clone()
            .unwrap()
    };
    let mut raw = Frontend::connect(&server);
    let ok = |status: char| (Vec::<String>::new(), status);
    let failed = |code: &str, status: char| (vec![code.to_owned()], status);

    // An error anywhere undoes the writes before it; after it, the
    // messages up to Sync are skipped (the last insert of the second).
    for (statements, code) in [
        (
            [
                "INSERT INTO p VALUES (1, 1)",
                "INSERT INTO p VALUES (2, 2)",
                "INSERT INTO p VALUES (1, 3)",
            ],
            "23505",
        ),
        (
            [
                "INSERT INTO p VALUES (5, 5)",
                "SELECT * FROM missing",
                "INSERT INTO p VALUES (6, 6)",
            ],
            "42P01",
        ),
    ] {
        assert_eq!(raw.pipeline(&statements), failed(code, 'I'));
        assert_eq!(count().await, "0");
    }

    // Without one, everything commits at Sync, and the pipeline's reads
    // see its writes.
    let fine = [
        "INSERT INTO p VALUES (1, 1)",
        "INSERT INTO p VALUES (2, 2)",
        "UPDATE p SET v = v * 10 WHERE id = 2",
        "SELECT * FROM p",
    ];
    assert_eq!(raw.pipeline(&fine), ok('I'));
    assert_eq!(count().await, "2");
    // The view saw both writes in one epoch.
    other.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        crate::common::column(&other, "SELECT CAST(s AS TEXT) FROM p_total").await,
        vec![Some("21".into())]
    );

    // BEGIN in a pipeline takes the writes before it into its block.
    let begun = [
        "INSERT INTO p VALUES (3, 3)",
        "BEGIN",
        "INSERT INTO p VALUES (4, 4)",
    ];
    assert_eq!(raw.pipeline(&begun), ok('T'));
    assert_eq!(raw.query("ROLLBACK"), ok('I'));
    assert_eq!(count().await, "2");

    // A statement that cannot run in a block commits the writes before it.
    let ddl = ["INSERT INTO p VALUES (8, 8)", "CREATE TABLE q (x INT)"];
    assert_eq!(raw.pipeline(&ddl), ok('I'));
    assert_eq!(count().await, "3");
    // A lone write commits as before.
    assert_eq!(raw.execute("INSERT INTO p VALUES (9, 9)"), ok('I'));
    assert_eq!(count().await, "4");
}

/// One binary COPY tuple of (int4, text) fields; `None` is NULL.
fn binary_tuple(id: i32, name: Option<&[u8]>) -> Vec<u8> {
    let mut tuple = 2i16.to_be_bytes().to_vec();
    tuple.extend(4i32.to_be_bytes());
    tuple.extend(id.to_be_bytes());
    match name {
        Some(name) => {
            tuple.extend((name.len() as i32).to_be_bytes());
            tuple.extend_from_slice(name);
        }
        None => tuple.extend((-1i32).to_be_bytes()),
    }
    tuple
}

#[tokio::test]
async fn binary_copy_in_reads_rows_and_refuses_bad_data() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE b (id INT PRIMARY KEY, name TEXT)")
        .await
        .unwrap();
    let header: Vec<u8> = [&b"PGCOPY\n\xff\r\n\0"[..], &[0; 8]].concat();
    let trailer = (-1i16).to_be_bytes().to_vec();
    let copy = async |data: Vec<u8>| {
        let sink = client
            .copy_in("COPY b FROM STDIN (FORMAT binary)")
            .await
            .unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        sink.finish().await
    };
    let good = [
        header.clone(),
        binary_tuple(1, Some("été".as_bytes())),
        binary_tuple(2, None),
        trailer.clone(),
    ]
    .concat();
    assert_eq!(copy(good).await.unwrap(), 2);
    let bad = [
        (b"PGCOPY-not".to_vec(), "22P04"),
        ([header.clone(), binary_tuple(3, None)].concat(), "22P04"),
        (
            [header.clone(), 1i16.to_be_bytes().to_vec(), trailer.clone()].concat(),
            "22P04",
        ),
        (
            [
                header.clone(),
                binary_tuple(3, Some(b"\xc3(")),
                trailer.clone(),
            ]
            .concat(),
            "22021",
        ),
    ];
    for (data, code) in bad {
        let error = copy(data).await.expect_err("bad binary COPY data");
        let got = error.code().map(|c| c.code().to_owned());
        assert_eq!(got.as_deref(), Some(code), "{error}");
    }
    let rows = client
        .query("SELECT id, name FROM b ORDER BY id", &[])
        .await
        .unwrap();
    let rows: Vec<(i32, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(rows, vec![(1, Some("été".into())), (2, None)]);
}

#[tokio::test]
async fn declared_cursors_are_portals_to_describe() {
    let server = TestServer::start().await;
    let mut raw = Frontend::connect(&server);
    let ok = (Vec::<String>::new(), 'T');
    assert_eq!(raw.query("BEGIN"), ok);
    assert_eq!(
        raw.query("DECLARE c1 CURSOR FOR SELECT 1 AS a, 'x' AS b"),
        ok
    );
    assert_eq!(
        raw.query("DECLARE c2 BINARY CURSOR FOR SELECT 2::bigint AS n"),
        ok
    );
    assert_eq!(
        raw.describe_portal("c1"),
        Some(vec![("a".into(), 23, 0), ("b".into(), 25, 0)])
    );
    assert_eq!(raw.describe_portal("c2"), Some(vec![("n".into(), 20, 1)]));
    // A name that is neither a portal nor a cursor is still an error.
    assert_eq!(raw.describe_portal("nope"), None);
    assert_eq!(raw.query("CLOSE c1"), ok);
    assert_eq!(raw.describe_portal("c1"), None);
    assert_eq!(raw.query("COMMIT"), (Vec::new(), 'I'));
}

#[tokio::test]
async fn declared_parameter_types_type_what_the_statement_leaves_open() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY, at DATE)")
        .await
        .unwrap();
    // psycopg declares each parameter's type; PostgreSQL describes an
    // open parameter (`SELECT $1`) with the declared type.
    let select = client
        .prepare_typed(
            "SELECT $1, $2, $3::int + 1",
            &[Type::INT8, Type::DATE, Type::INT2],
        )
        .await
        .unwrap();
    let types: Vec<Type> = select.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(types, vec![Type::INT8, Type::DATE, Type::INT4]);
    assert_eq!(select.params(), &[Type::INT8, Type::DATE, Type::INT2]);
    let day = NaiveDate::from_ymd_opt(2024, 1, 2).unwrap();
    let row = client
        .query_one(&select, &[&5i64, &day, &41i16])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 5);
    assert_eq!(row.get::<_, NaiveDate>(1), day);
    assert_eq!(row.get::<_, i32>(2), 42);
    // A declared type wins over the one the statement would infer, and
    // the value is compared as PostgreSQL compares int4 with int8.
    client
        .execute("INSERT INTO t VALUES (7, '2024-01-02')", &[])
        .await
        .unwrap();
    let lookup = client
        .prepare_typed("SELECT at FROM t WHERE id = $1", &[Type::INT8])
        .await
        .unwrap();
    assert_eq!(lookup.params(), &[Type::INT8]);
    let rows = client.query(&lookup, &[&7i64]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(client
        .query(&lookup, &[&(1i64 << 40)])
        .await
        .unwrap()
        .is_empty());
}

/// A `numeric` in PostgreSQL's binary form, built by hand.
#[derive(Debug, PartialEq)]
struct RawNumeric(Vec<u8>);

impl RawNumeric {
    fn new(weight: i16, negative: bool, dscale: u16, groups: &[i16]) -> Self {
        let mut bytes = Vec::new();
        bytes.extend((groups.len() as i16).to_be_bytes());
        bytes.extend(weight.to_be_bytes());
        bytes.extend((if negative { 0x4000u16 } else { 0 }).to_be_bytes());
        bytes.extend(dscale.to_be_bytes());
        for g in groups {
            bytes.extend(g.to_be_bytes());
        }
        RawNumeric(bytes)
    }
}

impl tokio_postgres::types::ToSql for RawNumeric {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    tokio_postgres::types::to_sql_checked!();
}

impl<'a> tokio_postgres::types::FromSql<'a> for RawNumeric {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawNumeric(raw.to_vec()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[tokio::test]
async fn numeric_values_are_exact_in_both_formats() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE n (id INT PRIMARY KEY, x NUMERIC)")
        .await
        .unwrap();
    // 12345678901234567890.123456789: 29 digits, more than rust_decimal
    // holds (the value used to arrive as 1234567890123456789.0123456789).
    let big = RawNumeric::new(
        4,
        false,
        9,
        &[1234, 5678, 9012, 3456, 7890, 1234, 5678, 9000],
    );
    client
        .execute("INSERT INTO n VALUES (1, $1)", &[&big])
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO n VALUES (2, $1)",
            &[&RawNumeric::new(-3, true, 10, &[1200])],
        )
        .await
        .unwrap();
    assert_eq!(
        crate::common::column(&client, "SELECT x FROM n ORDER BY id").await,
        vec![
            Some("12345678901234567890.123456789".into()),
            Some("-0.0000000012".into()),
        ],
        "text form: every digit, without the column's trailing zeros"
    );
    let row = client
        .query_one("SELECT x FROM n WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, RawNumeric>(0),
        RawNumeric::new(
            4,
            false,
            9,
            &[1234, 5678, 9012, 3456, 7890, 1234, 5678, 9000]
        ),
        "binary form: every digit"
    );
    // More fraction digits than the unconstrained numeric holds (10):
    // 22003, not a rounded number.
    let error = client
        .execute(
            "INSERT INTO n VALUES (3, $1)",
            &[&RawNumeric::new(-3, true, 12, &[1234])],
        )
        .await
        .unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("22003"));
    // Beyond what the column holds: 22003, not a different number.
    let huge = RawNumeric::new(9, false, 0, &[1]);
    let error = client
        .execute("INSERT INTO n VALUES (3, $1)", &[&huge])
        .await
        .unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("22003"));
    // Text parameters in scientific notation.
    client
        .batch_execute("CREATE TABLE m (id INT PRIMARY KEY, x NUMERIC(20, 12))")
        .await
        .unwrap();
    let mut raw = Frontend::connect(&server);
    assert_eq!(
        raw.execute_text("INSERT INTO m VALUES (1, $1)", 1700, "-1.234E-9"),
        (Vec::new(), 'I')
    );
    assert_eq!(
        crate::common::column(&client, "SELECT x FROM m").await,
        vec![Some("-0.000000001234".into())]
    );
}

#[tokio::test]
async fn advisory_locks_wait_and_go_with_their_session() {
    let server = TestServer::start().await;
    let (holder, holder_connection) = tokio_postgres::connect(&server.conn_string(), NoTls)
        .await
        .unwrap();
    let holder_task = tokio::spawn(holder_connection);
    holder
        .batch_execute("SELECT pg_advisory_lock(5)")
        .await
        .unwrap();
    let waiter = server.client().await;
    let wait = tokio::spawn(async move {
        waiter
            .batch_execute("SELECT pg_advisory_lock(5)")
            .await
            .map(|_| waiter)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!wait.is_finished(), "the lock is held by another session");
    // The holder's connection ends: its locks go with its session.
    drop(holder);
    holder_task.await.unwrap().unwrap();
    let waiter = tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("the waiter gets the lock once the holder is gone")
        .unwrap()
        .unwrap();
    let third = server.client().await;
    assert_eq!(
        crate::common::column(&third, "SELECT pg_try_advisory_lock(5)").await,
        vec![Some("f".into())]
    );
    waiter
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .await
        .unwrap();
    assert_eq!(
        crate::common::column(&third, "SELECT pg_try_advisory_lock(5)").await,
        vec![Some("t".into())]
    );
    // pg_sleep holds no thread and stops when canceled.
    let cancel = third.cancel_token();
    let started = std::time::Instant::now();
    let sleeper = tokio::spawn(async move { third.batch_execute("SELECT pg_sleep(600)").await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    cancel.cancel_query(NoTls).await.unwrap();
    let error = sleeper.await.unwrap().unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("57014"));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn timeouts_protect_the_server() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (x INT); SET statement_timeout = '200ms'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(sqlstate(&client, "SELECT pg_sleep(30)").await, "57014");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    client
        .batch_execute("SET statement_timeout = 0; SELECT pg_sleep(0.3)")
        .await
        .unwrap();
    assert_eq!(
        sqlstate(&client, "SET statement_timeout = 'soon'").await,
        "22023"
    );

    // A block left idle past idle_in_transaction_session_timeout is rolled
    // back and its connection ended.
    client
        .batch_execute("SET idle_in_transaction_session_timeout = '200ms'")
        .await
        .unwrap();
    client
        .batch_execute("BEGIN; INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let error = client.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("25P03"), "{error}");
    assert!(client.is_closed() || client.batch_execute("SELECT 1").await.is_err());
    let other = server.client().await;
    assert_eq!(
        crate::common::column(&other, "SELECT count(*) FROM t").await,
        vec![Some("0".into())],
        "the idle block's write is gone"
    );
    // A block that keeps working is not ended.
    other
        .batch_execute("SET idle_in_transaction_session_timeout = '300ms'; BEGIN")
        .await
        .unwrap();
    for _ in 0..5 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        other
            .batch_execute("INSERT INTO t VALUES (2)")
            .await
            .unwrap();
    }
    other.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        crate::common::column(&other, "SELECT count(*) FROM t").await,
        vec![Some("5".into())]
    );
}

async fn copy_out_bytes(client: &tokio_postgres::Client, sql: &str) -> Vec<u8> {
    use futures::TryStreamExt;
    let stream = client.copy_out(sql).await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    chunks.concat()
}

#[tokio::test]
async fn copy_to_stdout_in_text_csv_and_binary() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE c (id INT PRIMARY KEY, name TEXT, v NUMERIC(10, 2));
             INSERT INTO c VALUES (1, 'a\tb', 1.5), (2, NULL, NULL), (3, 'x,\"y\"', -2)",
        )
        .await
        .unwrap();
    let text = copy_out_bytes(&client, "COPY (SELECT * FROM c ORDER BY id) TO STDOUT").await;
    assert_eq!(
        String::from_utf8(text).unwrap(),
        "1\ta\\tb\t1.50\n2\t\\N\t\\N\n3\tx,\"y\"\t-2.00\n"
    );
    let csv = copy_out_bytes(
        &client,
        "COPY (SELECT id, name FROM c ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await;
    assert_eq!(
        String::from_utf8(csv).unwrap(),
        "id,name\n1,a\tb\n2,\n3,\"x,\"\"y\"\"\"\n"
    );
    let columns = copy_out_bytes(&client, "COPY c (name, id) TO STDOUT WITH (FORMAT csv)").await;
    assert_eq!(String::from_utf8(columns).unwrap().lines().count(), 3);
    // Binary: the file header, one tuple per row, the trailer.
    let binary = copy_out_bytes(
        &client,
        "COPY (SELECT id FROM c WHERE id = 3) TO STDOUT (FORMAT binary)",
    )
    .await;
    let mut expected = b"PGCOPY\n\xff\r\n\0".to_vec();
    expected.extend([0u8; 8]);
    expected.extend(1i16.to_be_bytes());
    expected.extend(4i32.to_be_bytes());
    expected.extend(3i32.to_be_bytes());
    expected.extend((-1i16).to_be_bytes());
    assert_eq!(binary, expected);
    let empty = copy_out_bytes(
        &client,
        "COPY (SELECT id FROM c WHERE false) TO STDOUT (FORMAT binary)",
    )
    .await;
    assert_eq!(
        empty,
        [&expected[..19], &(-1i16).to_be_bytes()[..]].concat()
    );
    // Inside a block COPY reads the block's own writes.
    client
        .batch_execute("BEGIN; INSERT INTO c VALUES (4, 'mine', 0)")
        .await
        .unwrap();
    let inside = copy_out_bytes(&client, "COPY (SELECT count(*) FROM c) TO STDOUT").await;
    assert_eq!(inside, b"4\n");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        sqlstate(&client, "COPY c TO '/tmp/weir-copy-out'").await,
        "0A000"
    );
}

/// An idle connection's DataFusion context is dropped (`idle.rs`) and
/// made again by its next statement, with the session's settings and
/// prepared statements intact; a session with an open cursor keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_release_their_context() {
    let (server, port) = TestServer::start_with_metrics().await;
    let idle = server.client().await;
    idle.batch_execute("SET TimeZone = 'Europe/Paris'")
        .await
        .unwrap();
    let prepared = idle
        .prepare("SELECT current_setting('TimeZone'), $1::int + 1")
        .await
        .unwrap();
    // OIDs stay as the session handed them out.
    idle.batch_execute("CREATE TABLE k1 (x INT); CREATE TABLE k2 (x INT)")
        .await
        .unwrap();
    let before = relation_oids(&idle).await;
    let holding = server.client().await;
    holding
        .batch_execute("CREATE TABLE k0 (x INT)")
        .await
        .unwrap();
    holding
        .batch_execute("BEGIN; DECLARE c CURSOR FOR SELECT * FROM generate_series(1, 3)")
        .await
        .unwrap();
    let released = || counter(port, "weir_session_contexts_released_total");
    assert_eq!(released(), 0);
    // Released between one and two check intervals (5 s) of idling.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while released() == 0 {
        assert!(std::time::Instant::now() < deadline, "never released");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(
        released(),
        1,
        "the session in a block, with a cursor, keeps its context"
    );
    let after = relation_oids(&idle).await;
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        before.iter().all(|b| after.contains(b)),
        "{before:?} then {after:?}"
    );
    let row = idle.query_one(&prepared, &[&41i32]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "Europe/Paris");
    assert_eq!(row.get::<_, i32>(1), 42);
    let shown = idle.simple_query("SHOW TimeZone").await.unwrap();
    let zone = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(zone.as_deref(), Some("Europe/Paris"));
    let fetched = holding.simple_query("FETCH 3 FROM c").await.unwrap();
    let rows = fetched
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 3);
    holding.batch_execute("COMMIT").await.unwrap();
}

/// The names and OIDs of the relations named `k...`, by name.
async fn relation_oids(client: &tokio_postgres::Client) -> Vec<(String, u32)> {
    let sql = "SELECT relname::text, oid FROM pg_class WHERE relname LIKE 'k%' ORDER BY 1";
    let rows = client.query(sql, &[]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Reads backend messages from `stream` until ReadyForQuery, or until
/// `limit` DataRow messages have gone by; returns how many did.
fn read_messages(stream: &mut std::net::TcpStream, limit: usize) -> usize {
    use std::io::Read;
    let mut rows = 0;
    while rows < limit {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).expect("a message header");
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        stream.read_exact(&mut body).expect("a message body");
        match header[0] {
            b'D' => rows += 1,
            b'E' => panic!("error: {}", String::from_utf8_lossy(&body)),
            b'Z' => break,
            _ => {}
        }
    }
    rows
}

/// A client that stops reading a large result, and a cursor left open in
/// a transaction block, hold nothing that commits wait for: writes commit
/// (each `INSERT` returns once its epoch is committed), a view over them
/// follows, and a checkpoint completes meanwhile; the stalled result then
/// arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_and_open_cursors_delay_no_commit() {
    use std::io::Write;
    let server = TestServer::start().await;
    let client = server.client().await;
    let rows = 200_000;
    client
        .batch_execute(&format!(
            "CREATE TABLE big (id INT PRIMARY KEY, pad TEXT);
             CREATE TABLE w (id INT PRIMARY KEY);
             CREATE MATERIALIZED VIEW wn AS SELECT count(*) AS n FROM w;
             INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, {rows}) AS g"
        ))
        .await
        .unwrap();
    // About 45 MB of rows, more than loopback's socket buffers hold: the
    // server's sends block once the client stops reading.
    let mut slow = std::net::TcpStream::connect(server.addr).unwrap();
    slow.write_all(&crate::common::startup_packet()).unwrap();
    read_messages(&mut slow, usize::MAX);
    let query = b"SELECT * FROM big\0";
    let mut message = vec![b'Q'];
    message.extend(((query.len() + 4) as u32).to_be_bytes());
    message.extend(query);
    slow.write_all(&message).unwrap();
    let first = read_messages(&mut slow, 100);

    let holder = server.client().await;
    holder
        .batch_execute("BEGIN; DECLARE c CURSOR FOR SELECT * FROM big")
        .await
        .unwrap();
    assert_eq!(
        holder.query("FETCH 10 FROM c", &[]).await.unwrap().len(),
        10
    );

    let started = std::time::Instant::now();
    for i in 0..50 {
        client
            .execute(&format!("INSERT INTO w VALUES ({i})"), &[])
            .await
            .unwrap();
    }
    client.batch_execute("CHECKPOINT; FLUSH").await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        column(&client, "SELECT n FROM wn").await,
        [Some("50".into())]
    );
    assert!(
        elapsed < std::time::Duration::from_secs(20),
        "50 commits took {elapsed:?} beside a stalled reader"
    );
    assert_eq!(
        holder.query("FETCH 10 FROM c", &[]).await.unwrap().len(),
        10
    );
    holder.batch_execute("COMMIT").await.unwrap();

    // The stalled result resumes where it stopped and arrives whole.
    let rest = tokio::task::spawn_blocking(move || read_messages(&mut slow, usize::MAX))
        .await
        .unwrap();
    assert_eq!(first + rest, rows);
}
