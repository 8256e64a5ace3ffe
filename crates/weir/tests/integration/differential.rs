//! The differential test: a corpus of statements (`tests/differential/
//! corpus.sql`) runs on Weir and on PostgreSQL, and each statement's
//! outcome is compared: its result columns' names and types, its rows as
//! text (as a set where the statement has no `ORDER BY`), its row count,
//! or its SQLSTATE. A statement marked `-- differs: reason` in the corpus
//! is one Weir is known to answer differently; `docs/differential.md`
//! lists them. The test fails when an unmarked statement differs, when a
//! marked one stops differing (the mark is stale), when more statements
//! are marked than [`KNOWN_DIFFERENCES`], or when a marked statement is
//! missing from the docs.
//!
//! PostgreSQL is the server `WEIR_TEST_POSTGRES_URL` names (`.ci/run`
//! starts one on loopback), or else one the test starts itself from the
//! installed PostgreSQL binaries on a free loopback port, stopped by its
//! process id. Without either the test fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::TestServer;
use crate::reference_postgres::{self, connect, Postgres};

/// How many corpus statements Weir is known to answer differently (see
/// `docs/differential.md`): 20 of 835, 2.4%. The target is at most 5%; the
/// test fails if the number grows.
const KNOWN_DIFFERENCES: usize = 20;

/// One statement of the corpus.
struct Case {
    /// Its line in the corpus file.
    line: usize,
    sql: String,
    /// Why Weir answers it differently, if it does.
    differs: Option<String>,
}

/// What a statement produced, comparable across servers.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Column names and types, then the rows as text.
    Rows {
        columns: Vec<(String, String)>,
        rows: Vec<Vec<Option<String>>>,
    },
    /// A command, with the row count its tag carries.
    Command(u64),
    /// An error's SQLSTATE.
    Error(String),
}

fn corpus_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/corpus.sql")
}

/// Splits the corpus into statements: each ends with a `;` at the end of a
/// line; `-- differs: ...` marks the statement after it.
fn read_corpus() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus_path()).expect("read the corpus");
    let mut cases = Vec::new();
    let mut sql = String::new();
    let mut start = 0;
    let mut differs = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if sql.is_empty() {
            if let Some(reason) = trimmed.strip_prefix("-- differs:") {
                differs = Some(reason.trim().to_owned());
                continue;
            }
            if trimmed.is_empty() || trimmed.starts_with("--") {
                continue;
            }
            start = i + 1;
        }
        if !sql.is_empty() {
            sql.push('\n');
        }
        sql.push_str(line);
        if trimmed.ends_with(';') {
            let statement = sql.trim().trim_end_matches(';').to_owned();
            cases.push(Case {
                line: start,
                sql: statement,
                differs: differs.take(),
            });
            sql.clear();
        }
    }
    assert!(sql.trim().is_empty(), "the corpus ends inside a statement");
    cases
}

/// Runs one statement: Parse for the result's columns, then the simple
/// protocol for its rows in text.
async fn run(client: &Client, sql: &str) -> Outcome {
    let code = |e: tokio_postgres::Error| {
        Outcome::Error(
            e.code()
                .map(|c| c.code().to_owned())
                .unwrap_or_else(|| format!("no SQLSTATE: {e}")),
        )
    };
    let statement = match client.prepare(sql).await {
        Ok(statement) => statement,
        Err(e) => return code(e),
    };
    let columns: Vec<(String, String)> = statement
        .columns()
        .iter()
        .map(|c| (c.name().to_owned(), c.type_().name().to_owned()))
        .collect();
    let messages = match client.simple_query(sql).await {
        Ok(messages) => messages,
        Err(e) => return code(e),
    };
    let mut rows = Vec::new();
    let mut count = 0;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => rows.push(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            SimpleQueryMessage::CommandComplete(n) => count = n,
            _ => {}
        }
    }
    if columns.is_empty() {
        return Outcome::Command(count);
    }
    if !sql.to_ascii_uppercase().contains("ORDER BY") {
        rows.sort();
    }
    Outcome::Rows { columns, rows }
}

/// A fresh database on the reference PostgreSQL, with Weir's session
/// defaults (UTC, ISO dates).
async fn reference_database() -> (Option<Postgres>, Client) {
    // Named as Weir's database is, so that `current_database()` compares.
    let (server, url) = reference_postgres::fresh_database("weir").await;
    let client = connect(&url).await;
    client
        .batch_execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'")
        .await
        .unwrap();
    (server, client)
}

#[tokio::test]
async fn statements_answer_as_postgresql_does() {
    let cases = read_corpus();
    assert!(
        cases.len() >= 500,
        "{} statements in the corpus",
        cases.len()
    );
    let (_postgres, reference) = reference_database().await;
    let server = TestServer::start().await;
    let weir = server.client().await;
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/differential.md"),
    )
    .expect("read docs/differential.md");

    let mut unexpected = Vec::new();
    let mut marked = 0;
    let mut errors_compared = 0;
    for case in &cases {
        let within = |server: &'static str, outcome| async move {
            tokio::time::timeout(Duration::from_secs(30), outcome)
                .await
                .unwrap_or_else(|_| {
                    panic!("line {}: no answer from {server}: {}", case.line, case.sql)
                })
        };
        let expected = within("PostgreSQL", run(&reference, &case.sql)).await;
        let actual = within("Weir", run(&weir, &case.sql)).await;
        if matches!(expected, Outcome::Error(_)) {
            errors_compared += 1;
        }
        let same = expected == actual;
        let report = || {
            format!(
                "line {}: {}\n  PostgreSQL: {expected:?}\n  Weir:       {actual:?}",
                case.line, case.sql
            )
        };
        match (&case.differs, same) {
            (None, false) => unexpected.push(report()),
            (Some(_), true) => unexpected.push(format!(
                "line {}: marked `differs` but now agrees: {}",
                case.line, case.sql
            )),
            (Some(_), false) => {
                marked += 1;
                if !docs.contains(&case.sql) {
                    unexpected.push(format!(
                        "line {}: marked `differs` but not listed in docs/differential.md: {}",
                        case.line, case.sql
                    ));
                }
            }
            (None, true) => {}
        }
    }
    eprintln!(
        "{} statements, {marked} known to differ, {errors_compared} compared by SQLSTATE",
        cases.len()
    );
    assert!(
        unexpected.is_empty(),
        "{} statements differ from PostgreSQL unexpectedly:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    // Today's count may only go down, and at most 5% may differ.
    assert!(
        marked <= KNOWN_DIFFERENCES,
        "{marked} statements are marked `differs`, more than the {KNOWN_DIFFERENCES} known"
    );
    assert!(
        marked * 20 <= cases.len(),
        "{marked} of {} statements differ, more than 5%",
        cases.len()
    );
    // The server went through every statement and still serves.
    assert_eq!(
        crate::common::column(&weir, "SELECT 1").await,
        vec![Some("1".into())]
    );
}
