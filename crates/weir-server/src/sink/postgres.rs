//! The PostgreSQL sink: a view's changes applied to a PostgreSQL table,
//! each committed epoch in one transaction that also records the epoch in
//! a progress table (`weir_sink_progress`), so that an epoch delivered
//! before a crash is skipped when it is offered again: exactly once
//! without two-phase commit.
//!
//! An epoch's changes are copied (`COPY ... FROM STDIN`, text format: the
//! values as a SELECT from Weir prints them, which PostgreSQL parses into
//! the target's column types) into a temporary staging table, then
//! applied with one statement or two: `upsert` deletes the keys of removed
//! rows and inserts the added rows with `ON CONFLICT (key) DO UPDATE`;
//! `append-only` inserts every added row as often as it was added.

use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt;
use tokio_postgres::{Client, NoTls};
use weir_stream::Changes;

use crate::catalog::ColumnDef;
use crate::error::{SqlState, WeirError, WeirResult};

/// The table that records, per sink, the last epoch applied.
const PROGRESS_TABLE: &str = "weir_sink_progress";

/// The temporary table each epoch's changes are copied into.
const STAGE_TABLE: &str = "weir_sink_stage";

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL sink's settings, from `WITH (...)`.
#[derive(Debug, Clone)]
pub(super) struct PostgresSink {
    config: tokio_postgres::Config,
    /// The target's schema and table.
    schema: String,
    table: String,
    /// `type = 'upsert'` (else `'append-only'`).
    upsert: bool,
    /// The key an upsert applies changes by.
    primary_key: Vec<String>,
}

impl PostgresSink {
    /// Reads the options (RisingWave's names for its PostgreSQL sink).
    pub(super) fn parse(options: &[(String, String)]) -> WeirResult<Self> {
        let mut config = tokio_postgres::Config::new();
        config
            .host("localhost")
            .port(5432)
            .user("postgres")
            .dbname("postgres")
            .application_name("weir sink")
            .connect_timeout(CONNECT_TIMEOUT);
        let mut schema = "public".to_owned();
        let mut table = None;
        let mut kind = None;
        let mut primary_key = Vec::new();
        for (key, value) in options {
            match key.as_str() {
                "host" => {
                    config.host(value);
                }
                "port" => {
                    let port = value.parse().map_err(|_| {
                        invalid(format!("sink option \"port\" = '{value}' is not a port"))
                    })?;
                    config.port(port);
                }
                "user" => {
                    config.user(value);
                }
                "password" => {
                    config.password(value);
                }
                "database" => {
                    config.dbname(value);
                }
                "schema" => schema = value.clone(),
                "table" => table = Some(value.clone()),
                "type" => kind = Some(value.as_str()),
                "primary_key" => {
                    primary_key = value.split(',').map(|c| c.trim().to_owned()).collect();
                }
                _ => return Err(super::unrecognized(key, value)),
            }
        }
        let Some(table) = table else {
            return Err(invalid("a PostgreSQL sink needs table = '...'".into()));
        };
        let upsert = match kind {
            Some("upsert") => true,
            Some("append-only") => false,
            _ => {
                return Err(invalid(
                    "a PostgreSQL sink needs type = 'upsert' or type = 'append-only'".into(),
                ))
            }
        };
        if upsert && primary_key.iter().all(|c| c.is_empty()) {
            return Err(invalid(
                "an upsert sink needs primary_key = 'column[, ...]': the key its rows are \
                 replaced and deleted by"
                    .into(),
            ));
        }
        Ok(PostgresSink {
            config,
            schema,
            table,
            upsert,
            primary_key,
        })
    }

    /// Checks the sink's query: its key columns exist, and an
    /// `append-only` sink's query only ever inserts.
    pub(super) fn check_query(&self, columns: &[ColumnDef], append_only: bool) -> WeirResult<()> {
        super::check_keyed_query(self.upsert, &self.primary_key, columns, append_only)
    }

    /// Connects and checks that the target table has the query's
    /// columns; creates the progress table if it is missing.
    pub(super) async fn check_target(&self, columns: &[ColumnDef]) -> WeirResult<()> {
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        self.connect(&names).await.map(drop).map_err(|e| match e {
            Failure::Connect(message) => WeirError::new(
                SqlState("08001"),
                format!("the PostgreSQL sink could not connect: {message}"),
            ),
            Failure::Target(state, message) => WeirError::new(state, message),
            Failure::Deliver(message) => WeirError::new(SqlState::IO_ERROR, message),
        })
    }

    /// A connection ready to deliver epochs of a query with `columns`.
    pub(super) async fn connect(&self, columns: &[String]) -> Result<Connection, Failure> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| Failure::Connect(e.to_string()))?;
        tokio::spawn(connection);
        let target = format!("{}.{}", quote(&self.schema), quote(&self.table));
        let found = table_columns(&client, &target).await.map_err(deliver)?;
        if found.is_empty() {
            return Err(Failure::Target(
                SqlState::UNDEFINED_TABLE,
                format!("the sink's target table {target} does not exist in PostgreSQL"),
            ));
        }
        if let Some(missing) = columns.iter().find(|c| !found.contains(c)) {
            return Err(Failure::Target(
                SqlState::UNDEFINED_COLUMN,
                format!("the sink's target table {target} has no column \"{missing}\""),
            ));
        }
        let list = columns
            .iter()
            .map(|c| quote(c))
            .collect::<Vec<_>>()
            .join(", ");
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {schema}.{PROGRESS_TABLE} \
                     (sink text PRIMARY KEY, epoch bigint NOT NULL); \
                 CREATE TEMP TABLE {STAGE_TABLE} ON COMMIT DELETE ROWS AS \
                     SELECT {list} FROM {target} WITH NO DATA; \
                 ALTER TABLE {STAGE_TABLE} ADD COLUMN weir_weight bigint NOT NULL",
                schema = quote(&self.schema),
            ))
            .await
            .map_err(deliver)?;
        Ok(Connection {
            client,
            statements: Statements::new(self, &target, columns),
        })
    }
}

/// A connection to the target, with its staging table made.
pub(super) struct Connection {
    client: Client,
    statements: Statements,
}

impl Connection {
    /// The last epoch of sink `name` that the target has applied (0 for
    /// none).
    pub(super) async fn delivered_epoch(&self, name: &str) -> Result<u64, Failure> {
        let row = self
            .client
            .query_opt(&self.statements.read_progress, &[&name])
            .await
            .map_err(deliver)?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0) as u64))
    }

    /// Applies epoch `epoch`'s `changes` (`text` in COPY's text format)
    /// and records the epoch, in one transaction.
    pub(super) async fn deliver(
        &mut self,
        name: &str,
        epoch: u64,
        changes: &Changes,
        text: Bytes,
    ) -> Result<(), Failure> {
        if !self.statements.upsert && changes.weights.values().iter().any(|&w| w < 0) {
            return Err(Failure::Deliver(format!(
                "epoch {epoch} deletes rows, which an append-only sink cannot deliver"
            )));
        }
        let statements = &self.statements;
        let transaction = self.client.transaction().await.map_err(deliver)?;
        let copy = transaction
            .copy_in(&statements.copy)
            .await
            .map_err(deliver)?;
        futures::pin_mut!(copy);
        copy.send(text).await.map_err(deliver)?;
        copy.finish().await.map_err(deliver)?;
        for apply in &statements.apply {
            transaction.execute(apply, &[]).await.map_err(deliver)?;
        }
        transaction
            .execute(
                &statements.write_progress,
                &[
                    &name as &(dyn tokio_postgres::types::ToSql + Sync),
                    &(epoch as i64),
                ],
            )
            .await
            .map_err(deliver)?;
        transaction.commit().await.map_err(deliver)
    }
}

/// The statements a connection runs, built once.
struct Statements {
    upsert: bool,
    copy: String,
    /// Applies the staged changes to the target, in order.
    apply: Vec<String>,
    read_progress: String,
    write_progress: String,
}

impl Statements {
    fn new(sink: &PostgresSink, target: &str, columns: &[String]) -> Self {
        let list = columns
            .iter()
            .map(|c| quote(c))
            .collect::<Vec<_>>()
            .join(", ");
        let progress = format!("{}.{PROGRESS_TABLE}", quote(&sink.schema));
        let apply = if sink.upsert {
            let key: Vec<String> = sink.primary_key.iter().map(|c| quote(c)).collect();
            let matches = key
                .iter()
                .map(|k| format!("t.{k} = s.{k}"))
                .collect::<Vec<_>>()
                .join(" AND ");
            let updates: Vec<String> = columns
                .iter()
                .filter(|c| !sink.primary_key.contains(*c))
                .map(|c| format!("{0} = EXCLUDED.{0}", quote(c)))
                .collect();
            let on_conflict = match updates.is_empty() {
                true => "DO NOTHING".to_owned(),
                false => format!("DO UPDATE SET {}", updates.join(", ")),
            };
            vec![
                format!(
                    "DELETE FROM {target} t USING {STAGE_TABLE} s \
                     WHERE s.weir_weight < 0 AND {matches}"
                ),
                format!(
                    "INSERT INTO {target} ({list}) SELECT {list} FROM {STAGE_TABLE} \
                     WHERE weir_weight > 0 ON CONFLICT ({}) {on_conflict}",
                    key.join(", ")
                ),
            ]
        } else {
            vec![format!(
                "INSERT INTO {target} ({list}) SELECT {list} FROM {STAGE_TABLE}, \
                 generate_series(1, weir_weight)"
            )]
        };
        Statements {
            upsert: sink.upsert,
            copy: format!("COPY {STAGE_TABLE} ({list}, weir_weight) FROM STDIN"),
            apply,
            read_progress: format!("SELECT epoch FROM {progress} WHERE sink = $1"),
            write_progress: format!(
                "INSERT INTO {progress} (sink, epoch) VALUES ($1, $2) \
                 ON CONFLICT (sink) DO UPDATE SET epoch = EXCLUDED.epoch"
            ),
        }
    }
}

/// Why a connection or a delivery failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The target could not be reached.
    Connect(String),
    /// The target table is missing or lacks a column.
    Target(SqlState, String),
    /// A statement failed.
    Deliver(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(m) => write!(f, "could not connect: {m}"),
            Failure::Target(_, m) | Failure::Deliver(m) => f.write_str(m),
        }
    }
}

fn deliver(error: tokio_postgres::Error) -> Failure {
    // The server's message, not only "db error".
    let message = match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    };
    Failure::Deliver(message)
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// A PostgreSQL identifier, quoted.
/// The column names of PostgreSQL table `target` (as SQL names it);
/// none if there is no such table.
pub(crate) async fn table_columns(
    client: &Client,
    target: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT attname::text FROM pg_attribute \
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
            &[&target],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_checked() {
        let upsert = options(&[("table", "t"), ("type", "upsert"), ("primary_key", "a, b")]);
        let sink = PostgresSink::parse(&upsert).unwrap();
        assert_eq!(sink.primary_key, ["a", "b"]);
        for (bad, says) in [
            (options(&[("type", "upsert")]), "needs table"),
            (options(&[("table", "t")]), "needs type"),
            (
                options(&[("table", "t"), ("type", "upsert")]),
                "needs primary_key",
            ),
            (
                options(&[("table", "t"), ("type", "append-only"), ("port", "x")]),
                "not a port",
            ),
            (
                options(&[("table", "t"), ("type", "append-only"), ("colour", "red")]),
                "not recognized",
            ),
        ] {
            let error = PostgresSink::parse(&bad).unwrap_err();
            assert!(error.to_string().contains(says), "{error}");
        }
    }

    #[test]
    fn an_upsert_deletes_by_key_then_inserts_on_conflict() {
        let sink = PostgresSink::parse(&options(&[
            ("table", "t"),
            ("type", "upsert"),
            ("primary_key", "k"),
        ]))
        .unwrap();
        let columns = ["k".to_owned(), "v\"x".to_owned()];
        let statements = Statements::new(&sink, "\"public\".\"t\"", &columns);
        assert_eq!(
            statements.apply,
            [
                "DELETE FROM \"public\".\"t\" t USING weir_sink_stage s WHERE s.weir_weight < 0 AND t.\"k\" = s.\"k\"",
                "INSERT INTO \"public\".\"t\" (\"k\", \"v\"\"x\") SELECT \"k\", \"v\"\"x\" FROM weir_sink_stage WHERE weir_weight > 0 ON CONFLICT (\"k\") DO UPDATE SET \"v\"\"x\" = EXCLUDED.\"v\"\"x\"",
            ]
        );
    }
}
