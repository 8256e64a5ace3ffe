//! Random and mutated SQL, and random protocol messages, at a running
//! server: whatever arrives, the server answers (rows or an error with a
//! SQLSTATE), keeps the connection unless the protocol itself was broken,
//! and keeps serving everyone else.
//!
//! Seeded (`WEIR_FUZZ_SEED`); `WEIR_FUZZ_STATEMENTS` (default 100,000)
//! and `WEIR_FUZZ_MESSAGES` (default 10,000) set the amounts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{column, TestServer};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The SQL of every record in the sqllogictest files: statements real
/// users write, to mutate. Statements that start long-running work
/// (materialized views, sources, tables a connector feeds) or wait on
/// purpose (changefeeds stream until the client stops them) are left
/// out, so a mutation cannot turn the run into a benchmark or a wait.
fn corpus() -> Vec<String> {
    let mut files = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests");
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "slt") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut statements = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if !(line.starts_with("statement") || line.starts_with("query")) {
                continue;
            }
            let sql: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.is_empty() && *l != "----")
                .collect();
            statements.push(sql.join("\n"));
        }
    }
    let banned = [
        "MATERIALIZED",
        "SOURCE",
        "SLEEP",
        "ADVISORY",
        "GENERATE_SERIES",
        "CHECKPOINT",
        "SUBSCRIBE",
        "CONNECTOR",
    ];
    statements.retain(|s| {
        let upper = s.to_uppercase();
        !banned.iter().any(|b| upper.contains(b))
    });
    statements
}

/// Tokens a mutation may insert.
const VOCABULARY: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "ORDER BY",
    "LIMIT",
    "JOIN",
    "ON",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "(",
    ")",
    ",",
    "*",
    "+",
    "-",
    "/",
    "%",
    "=",
    "<>",
    "||",
    "::int",
    "::bigint",
    "::numeric(38,10)",
    "::float8",
    "::text",
    "::date",
    "::timestamp",
    "::interval",
    "0",
    "1",
    "-1",
    "2147483647",
    "-9223372036854775808",
    "9223372036854775807",
    "1e308",
    "1e400",
    "0.5",
    "''",
    "'x'",
    "'2024-01-01'",
    "'NaN'",
    "E'\\\\x'",
    "CASE WHEN",
    "THEN",
    "ELSE",
    "END",
    "IN",
    "EXISTS",
    "UNION",
    "DISTINCT",
    "count(*)",
    "sum(",
    "avg(",
    "min(",
    "max(",
    "t1",
    "t2",
    "a",
    "b",
    "c",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT s",
    "INSERT INTO t1 VALUES",
    "UPDATE t1 SET",
    "DELETE FROM",
    "VALUES",
    "ARRAY[1, 2]",
    "[1]",
    "$1",
    ";",
    "WITH",
    "LATERAL",
    "OVER ()",
    "interval '1 day'",
    "now()",
];

fn mutate(rng: &mut StdRng, sql: &str) -> String {
    let mut tokens: Vec<String> = sql.split_whitespace().map(str::to_owned).collect();
    for _ in 0..rng.random_range(1..=3) {
        let len = tokens.len();
        match rng.random_range(0..8) {
            0 if len > 0 => {
                tokens.remove(rng.random_range(0..len));
            }
            1 if len > 0 => {
                let t = tokens[rng.random_range(0..len)].clone();
                tokens.insert(rng.random_range(0..=len), t);
            }
            2 if len > 1 => {
                let (i, j) = (rng.random_range(0..len), rng.random_range(0..len));
                tokens.swap(i, j);
            }
            3 if len > 0 => {
                tokens.truncate(rng.random_range(0..len));
            }
            4 => {
                // Deep nesting.
                let depth = rng.random_range(1..200);
                let at = rng.random_range(0..=len);
                tokens.insert(at, "(".repeat(depth));
                let close = rng.random_range(at..=tokens.len());
                tokens.insert(close, ")".repeat(depth));
            }
            5 => {
                // Random characters.
                let junk: String = (0..rng.random_range(1..12))
                    .map(|_| rng.random_range(b' '..=b'~') as char)
                    .collect();
                tokens.insert(rng.random_range(0..=len), junk);
            }
            _ => {
                let word = VOCABULARY[rng.random_range(0..VOCABULARY.len())];
                tokens.insert(rng.random_range(0..=len), word.to_owned());
            }
        }
    }
    tokens.join(" ")
}

const SETUP: &str = "SET statement_timeout = '2s';
    CREATE TABLE IF NOT EXISTS t1 (a INT PRIMARY KEY, b TEXT, c DOUBLE PRECISION);
    CREATE TABLE IF NOT EXISTS t2 (a BIGINT, b NUMERIC(10, 2), c TIMESTAMP)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sql_and_protocol_bytes_never_take_the_server_down() {
    let seed = env_number("WEIR_FUZZ_SEED", 5);
    let statements = env_number("WEIR_FUZZ_STATEMENTS", 100_000);
    let messages = env_number("WEIR_FUZZ_MESSAGES", 10_000);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut server = TestServer::start_with(&["--query-memory-mb", "256"]).await;
    let client = server.client().await;
    client.batch_execute(SETUP).await.unwrap();
    let watcher = server.client().await;
    let corpus = corpus();
    assert!(
        corpus.len() > 500,
        "the corpus has {} statements",
        corpus.len()
    );

    let (mut answered, mut refused) = (0u64, 0u64);
    for i in 0..statements {
        let base = &corpus[rng.random_range(0..corpus.len())];
        let sql = if rng.random_range(0..10) == 0 {
            base.clone()
        } else {
            mutate(&mut rng, base)
        };
        match client.simple_query(&sql).await {
            Ok(_) => answered += 1,
            Err(e) => {
                assert!(
                    e.as_db_error().is_some(),
                    "statement {i} (seed {seed}) lost the connection: {e}\n{sql}"
                );
                refused += 1;
                if e.code() == Some(&tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION) {
                    let _ = client.simple_query("ROLLBACK").await;
                }
            }
        }
        if i % 100 == 99 {
            // Leave any block the mutations opened, and restore the tables.
            let _ = client.simple_query("ROLLBACK").await;
        }
        if i % 2_000 == 1_999 {
            let _ = client.batch_execute(SETUP).await;
            assert!(server.is_running(), "the server died near statement {i}");
            assert_eq!(column(&watcher, "SELECT 1").await, vec![Some("1".into())]);
        }
    }
    println!("{statements} statements: {answered} answered, {refused} refused with an error");
    assert!(answered > statements / 20, "too few statements ran");
    assert!(refused > statements / 20, "too few statements were refused");

    let mut sent = 0u64;
    let mut connections = 0u64;
    while sent < messages {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        if rng.random_range(0..4) > 0 {
            let _ = stream.write_all(&crate::common::startup_packet());
        }
        for _ in 0..rng.random_range(1..20) {
            let _ = stream.write_all(&random_message(&mut rng));
            sent += 1;
        }
        let mut buf = [0u8; 4096];
        while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
        connections += 1;
        if connections.is_multiple_of(50) {
            assert!(server.is_running(), "the server died after {sent} messages");
            assert_eq!(column(&watcher, "SELECT 1").await, vec![Some("1".into())]);
        }
    }
    println!("{sent} protocol messages on {connections} connections");
    assert!(server.is_running());
    assert_eq!(column(&watcher, "SELECT 2").await, vec![Some("2".into())]);
}

/// A frontend message with a real or random type, a body of random bytes
/// (sometimes a plausible query string) and a length that is usually
/// right.
fn random_message(rng: &mut StdRng) -> Vec<u8> {
    const TAGS: &[u8] = b"QPBEDCSHXdcfFp";
    let tag = if rng.random_range(0..10) == 0 {
        rng.random()
    } else {
        TAGS[rng.random_range(0..TAGS.len())]
    };
    let mut body: Vec<u8> = match rng.random_range(0..3) {
        0 => b"SELECT 1\0".to_vec(),
        _ => (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
    };
    if rng.random_range(0..2) == 0 {
        body.push(0);
    }
    let length = match rng.random_range(0..10) {
        0 => rng.random_range(0..8),
        1 => rng.random(),
        _ => body.len() as u32 + 4,
    };
    let mut message = vec![tag];
    message.extend(length.to_be_bytes());
    message.extend(body);
    message
}
