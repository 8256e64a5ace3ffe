//! Runs every sqllogictest file under `sql-tests/` against a real server.
//! Each file gets a fresh server, so files are independent.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::common::TestServer;

struct Weir {
    client: Client,
}

#[derive(Debug)]
struct DbError(tokio_postgres::Error);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(f, "{}", db.message()),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for DbError {}

#[async_trait]
impl AsyncDB for Weir {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let messages = self.client.simple_query(sql).await.map_err(DbError)?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut count = 0;
        for message in messages {
            match message {
                SimpleQueryMessage::RowDescription(desc) => columns = Some(desc.len()),
                SimpleQueryMessage::Row(row) => {
                    columns = Some(row.len());
                    rows.push(
                        (0..row.len())
                            .map(|i| match row.get(i) {
                                None => "NULL".to_owned(),
                                Some("") => "(empty)".to_owned(),
                                Some(v) => v.to_owned(),
                            })
                            .collect(),
                    );
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        Ok(match columns {
            Some(width) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; width],
                rows,
            },
            None => DBOutput::StatementComplete(count),
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        err.0.code().map(|c| c.code().to_owned())
    }
}

fn slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read sql-tests") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            slt_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests");
    let mut files = Vec::new();
    slt_files(&root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no .slt files under {}", root.display());
    let filter = std::env::var("SLT_FILTER").unwrap_or_default();
    let mut failures = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.to_string_lossy().contains(&filter))
    {
        let server = TestServer::start().await;
        let conn = server.conn_string();
        let mut runner = sqllogictest::Runner::new(move || {
            let conn = conn.clone();
            async move {
                let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                    .await
                    .map_err(DbError)?;
                tokio::spawn(connection);
                Ok::<_, DbError>(Weir { client })
            }
        });
        if let Err(e) = runner.run_file_async(file).await {
            failures.push(format!("{}:\n{}", file.display(), e.display(true)));
        }
        drop(server);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
