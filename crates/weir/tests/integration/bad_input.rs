//! Bad input never panics the server, hangs it, or drops other sessions:
//! malformed SQL, garbage on the socket, clients vanishing mid-query or
//! mid-COPY, oversized values.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::{column, sqlstate, TestServer};

#[tokio::test]
async fn malformed_statements_get_errors_and_the_session_goes_on() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let cases = [
        ("", None),
        ("SELECT (1", Some("42601")),
        ("SELECT 'unterminated", Some("42601")),
        ("CREATE TABLE (a INT)", Some("42601")),
        ("INSERT INTO nowhere VALUES (1)", Some("42P01")),
        ("DROP TABLE nowhere", Some("42P01")),
        ("CREATE TABLE t (a INT PRIMARY KEY, a INT)", None),
        ("SET no_such_setting = 1", Some("42704")),
        ("CREATE TABLE u (a INT REFERENCES t (a))", Some("0A000")),
        ("SELECT CAST(99999 AS SMALLINT)", Some("22003")),
        ("SELECT CAST('x' AS INT)", Some("22P02")),
        ("COPY nowhere FROM STDIN", Some("42P01")),
        ("COPY (SELECT 1) TO '/tmp/weir-not-written'", Some("0A000")),
    ];
    for (sql, code) in cases {
        match code {
            Some(code) => assert_eq!(sqlstate(&client, sql).await, code, "{sql}"),
            None => {
                let _ = client.simple_query(sql).await;
            }
        }
    }
    assert_eq!(
        column(&client, "SELECT 1 + 1").await,
        vec![Some("2".into())]
    );
}

fn raw(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

#[tokio::test]
async fn garbage_on_the_socket_closes_only_that_connection() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &[0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef],
        &[0xff; 64],
        &[0, 0, 0, 4],
    ];
    for bytes in garbage {
        let mut stream = raw(&server);
        let _ = stream.write_all(bytes);
        let mut buf = [0u8; 256];
        // The server answers with an error or closes; it must not hang.
        let _ = stream.read(&mut buf);
    }
    // A startup packet claiming a huge length.
    let mut stream = raw(&server);
    let _ = stream.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0]);
    let mut buf = [0u8; 64];
    let _ = stream.read(&mut buf);
    drop(stream);
    assert_eq!(
        column(&client, "SELECT count(*) FROM t").await,
        vec![Some("1".into())]
    );
    let other = server.client().await;
    assert_eq!(
        column(&other, "SELECT count(*) FROM t").await,
        vec![Some("1".into())]
    );
}

#[tokio::test]
async fn clients_that_vanish_mid_query_or_mid_copy_leave_nothing_behind() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE big (x BIGINT); INSERT INTO big SELECT * FROM generate_series(1, 2000)",
        )
        .await
        .unwrap();
    client
        .batch_execute("CREATE TABLE c (id INT PRIMARY KEY)")
        .await
        .unwrap();
    {
        let doomed = server.client().await;
        let query = doomed.simple_query("SELECT count(*) FROM big a, big b, big c");
        let _ = tokio::time::timeout(Duration::from_millis(200), query).await;
    }
    {
        let doomed = server.client().await;
        let sink = doomed.copy_in("COPY c FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        use futures::SinkExt;
        sink.send(bytes::Bytes::from_static(b"1\n2\n3\n"))
            .await
            .unwrap();
        // Dropped without finishing: the connection closes mid-COPY.
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        column(&client, "SELECT count(*) FROM c").await,
        vec![Some("0".into())]
    );
    client
        .batch_execute("INSERT INTO c VALUES (1)")
        .await
        .unwrap();
    assert_eq!(
        column(&client, "SELECT count(*) FROM c").await,
        vec![Some("1".into())]
    );
}

#[tokio::test]
async fn large_values_are_stored_or_refused_cleanly() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE blobs (id INT PRIMARY KEY, body TEXT)")
        .await
        .unwrap();
    let body = "x".repeat(8 << 20);
    let n = client
        .execute("INSERT INTO blobs VALUES ($1, $2)", &[&1i32, &body])
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        column(&client, "SELECT length(body) FROM blobs").await,
        vec![Some((8 << 20).to_string())]
    );
    // A statement with a huge literal list is planned and stored too.
    let values: Vec<String> = (2..20_000).map(|i| format!("({i}, 'v{i}')")).collect();
    client
        .batch_execute(&format!("INSERT INTO blobs VALUES {}", values.join(",")))
        .await
        .unwrap();
    assert_eq!(
        column(&client, "SELECT count(*) FROM blobs").await,
        vec![Some("19999".into())]
    );
}

#[tokio::test]
async fn many_sessions_at_once() {
    let server = TestServer::start().await;
    let setup = server.client().await;
    setup
        .batch_execute("CREATE TABLE hits (session INT, n INT)")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for s in 0..50 {
        let conn = server.conn_string();
        tasks.push(tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            for n in 0..5 {
                client
                    .execute("INSERT INTO hits VALUES ($1, $2)", &[&s, &n])
                    .await
                    .unwrap();
            }
            let _ = client.simple_query("SELEC broken").await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        column(&setup, "SELECT count(*) FROM hits").await,
        vec![Some("250".into())]
    );
}

#[tokio::test]
async fn queries_beyond_the_memory_limit_fail_cleanly() {
    let server = TestServer::start_with(&["--query-memory-mb", "16"]).await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE big (x BIGINT); INSERT INTO big SELECT * FROM generate_series(1, 100000)",
        )
        .await
        .unwrap();
    // Sorting 20 million rows needs the memory; sending them does not
    // (see `protocol::results_stream_in_bounded_memory`).
    let huge =
        "SELECT a.x, b.x FROM big a CROSS JOIN (SELECT x FROM big LIMIT 200) b ORDER BY 1, 2";
    assert_eq!(sqlstate(&client, huge).await, "54000");
    let grouped = "SELECT a.x % 7, count(*) FROM big a CROSS JOIN (SELECT x FROM big LIMIT 20) b GROUP BY 1 ORDER BY 1";
    assert_eq!(column(&client, grouped).await.len(), 7);
    assert_eq!(
        column(&client, "SELECT count(*) FROM big").await,
        vec![Some("100000".into())]
    );
}

/// Expressions as deep as their terms: a long `OR` chain (as ORMs write
/// `IN` lists) and a long sum. With 2 MiB thread stacks, 2,000 `OR` terms
/// overflowed the stack and aborted the server; the integer sum cost the
/// cube of its terms in the overflow-checking rewrite. Both answer, and
/// the server serves the next client.
#[tokio::test]
async fn deep_expressions_are_answered_without_taking_the_server_down() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let terms = 2_500;
    let chain: Vec<String> = (0..terms).map(|i| format!("{i} = 1")).collect();
    let sql = format!("SELECT 'found' WHERE {}", chain.join(" OR "));
    assert_eq!(column(&client, &sql).await, vec![Some("found".into())]);
    let sum = format!("SELECT {}", vec!["1"; 300].join(" + "));
    assert_eq!(column(&client, &sum).await, vec![Some("300".into())]);
    // 10,000 terms would take DataFusion minutes to plan: 54001 at once,
    // for chains and for nesting alike; a wide IN list is not deep.
    for sql in [
        format!("SELECT {}", vec!["1"; 10_000].join(" + ")),
        format!("SELECT 1 WHERE {}", vec!["1 = 0"; 10_000].join(" OR ")),
        format!("SELECT {}1{}", "(".repeat(10_000), ")".repeat(10_000)),
    ] {
        let started = std::time::Instant::now();
        assert_eq!(crate::common::sqlstate(&client, &sql).await, "54001");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    let list: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    let wide = format!("SELECT 1 IN ({})", list.join(", "));
    assert_eq!(column(&client, &wide).await, vec![Some("t".into())]);
    let other = server.client().await;
    assert_eq!(column(&other, "SELECT 1").await, vec![Some("1".into())]);
}

/// A statement that takes seconds to plan does not hold up the others:
/// a new connection and another session are served while it plans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plan_does_not_hold_up_other_sessions() {
    let server = TestServer::start().await;
    let heavy = server.client().await;
    let open = server.client().await;
    // About 2 s of planning in a debug build (DataFusion's type coercion
    // costs the square of the terms).
    let sum = format!("SELECT {}", vec!["1"; 700].join(" + "));
    let planning = tokio::spawn(async move { column(&heavy, &sum).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let fresh = server.client().await;
    assert_eq!(column(&fresh, "SELECT 1").await, vec![Some("1".into())]);
    assert_eq!(column(&open, "SELECT 2").await, vec![Some("2".into())]);
    assert!(
        !planning.is_finished(),
        "the other sessions were served only once the deep statement was planned"
    );
    assert_eq!(planning.await.unwrap(), vec![Some("700".into())]);
}

/// `statement_timeout` stops a statement while it is still planning (the
/// planner checks the deadline between its rules), not only once it runs.
#[tokio::test]
async fn statement_timeout_stops_a_statement_that_is_still_planning() {
    let server = TestServer::start().await;
    let client = server.client().await;
    // About 2 s of planning in a debug build.
    let sum = format!("SELECT {}", vec!["1"; 700].join(" + "));
    let started = std::time::Instant::now();
    assert_eq!(column(&client, &sum).await, vec![Some("700".into())]);
    let planned = started.elapsed();
    client
        .batch_execute("SET statement_timeout = '100ms'")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let error = client.simple_query(&sum).await.unwrap_err();
    let stopped = started.elapsed();
    assert_eq!(error.code().map(|c| c.code()), Some("57014"), "{error}");
    assert!(
        stopped < planned.mul_f64(0.75),
        "stopped after {stopped:?}; the whole plan took {planned:?}"
    );
    client
        .batch_execute("RESET statement_timeout")
        .await
        .unwrap();
    assert_eq!(column(&client, "SELECT 1").await, vec![Some("1".into())]);
}

/// Sends a startup packet for user `weir` and reads up to ReadyForQuery.
fn start_session(stream: &mut TcpStream) {
    stream.write_all(&crate::common::startup_packet()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(6).any(|w| w == b"Z\0\0\0\x05I") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed during startup");
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Everything the server sends until it closes the connection (or stops
/// answering for the read timeout).
fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (seen, true),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return (seen, false),
        }
    }
}

fn has_sqlstate(bytes: &[u8], code: &str) -> bool {
    let field = format!("C{code}\0");
    bytes.windows(field.len()).any(|w| w == field.as_bytes())
}

#[tokio::test]
async fn malformed_messages_get_08p01_and_a_close() {
    let server = TestServer::start().await;
    // A startup packet whose length is shorter than its own header.
    let mut stream = raw(&server);
    stream.write_all(&3u32.to_be_bytes()).unwrap();
    let (answer, closed) = read_to_close(&mut stream);
    assert!(has_sqlstate(&answer, "08P01") && closed, "startup length 3");
    // A message whose length field is 0, and a Query without its NUL.
    let query = b"SELECT 1";
    let mut no_nul = vec![b'Q'];
    no_nul.extend(((query.len() + 4) as u32).to_be_bytes());
    no_nul.extend_from_slice(query);
    for (what, bytes) in [("length 0", vec![b'Q', 0, 0, 0, 0]), ("no NUL", no_nul)] {
        let mut stream = raw(&server);
        start_session(&mut stream);
        stream.write_all(&bytes).unwrap();
        let (answer, closed) = read_to_close(&mut stream);
        assert!(has_sqlstate(&answer, "08P01") && closed, "{what}");
    }
    // A Bind with more parameters than its statement has: 08P01, and the
    // session goes on (PostgreSQL reports it as an ERROR).
    let mut stream = raw(&server);
    start_session(&mut stream);
    let mut messages = Vec::new();
    let mut push = |tag: u8, body: &[u8]| {
        messages.push(tag);
        messages.extend(((body.len() + 4) as u32).to_be_bytes());
        messages.extend_from_slice(body);
    };
    push(b'P', b"\0SELECT 1\0\0\0");
    let mut bind = vec![0u8, 0, 0, 0, 0, 2];
    for value in [b"1", b"2"] {
        bind.extend(1i32.to_be_bytes());
        bind.extend_from_slice(value);
    }
    bind.extend([0, 0]);
    push(b'B', &bind);
    push(b'E', &[0, 0, 0, 0, 0]);
    push(b'S', &[]);
    push(b'Q', b"SELECT 41 + 1\0");
    stream.write_all(&messages).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let (answer, _) = read_to_close(&mut stream);
    assert!(has_sqlstate(&answer, "08P01"), "bind with extra parameters");
    assert!(
        answer.windows(2).any(|w| w == b"42"),
        "the session answers the next query"
    );
}
