//! A `postgres-cdc` table's options, and the checks `CREATE TABLE` makes
//! against the upstream server before the table exists.

use std::time::Duration;

use pgwire_replication::{Lsn, ReplicationConfig};
use tokio_postgres::{Client, NoTls};

use crate::catalog::TableDef;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::sink::postgres::{quote, table_columns};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The session settings both connections use, so that values print as
/// Weir's text input reads them (ISO dates, UTC times, every float digit,
/// hex bytea).
const SESSION_SETTINGS: [(&str, &str); 5] = [
    ("datestyle", "ISO, YMD"),
    ("timezone", "UTC"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
    ("intervalstyle", "postgres"),
];

/// Where a `postgres-cdc` table's rows come from, from `WITH (...)`
/// (RisingWave's option names).
#[derive(Debug, Clone)]
pub struct PostgresCdc {
    host: String,
    port: u16,
    user: String,
    password: String,
    database: String,
    /// The upstream table's schema and name.
    pub schema: String,
    /// The upstream table.
    pub table: String,
    /// The replication slot the table reads through.
    pub slot: String,
    /// The publication the slot decodes.
    pub publication: String,
    /// Whether Weir created the publication (no `publication.name` was
    /// given), and so drops it with the table.
    pub owns_publication: bool,
}

impl PostgresCdc {
    /// Reads the options of table `name` (keys lowercased, without
    /// `connector`).
    pub fn parse(name: &str, options: &[(String, String)]) -> WeirResult<Self> {
        let mut cdc = PostgresCdc {
            host: "localhost".into(),
            port: 5432,
            user: "postgres".into(),
            password: String::new(),
            database: "postgres".into(),
            schema: "public".into(),
            table: name.to_owned(),
            slot: format!("weir_{name}"),
            publication: String::new(),
            owns_publication: true,
        };
        for (key, value) in options {
            match key.as_str() {
                "hostname" => cdc.host = value.clone(),
                "port" => {
                    cdc.port = value.parse().map_err(|_| {
                        invalid(format!("option \"port\" = '{value}' is not a port"))
                    })?
                }
                "username" => cdc.user = value.clone(),
                "password" => cdc.password = value.clone(),
                "database.name" => cdc.database = value.clone(),
                "schema.name" => cdc.schema = value.clone(),
                "table.name" => cdc.table = value.clone(),
                "slot.name" => cdc.slot = value.clone(),
                "publication.name" => {
                    cdc.publication = value.clone();
                    cdc.owns_publication = false;
                }
                other => {
                    return Err(invalid(format!(
                        "unrecognized postgres-cdc option \"{other}\"; options: hostname, port, \
                         username, password, database.name, schema.name, table.name, slot.name, \
                         publication.name"
                    )))
                }
            }
        }
        let valid_slot = !cdc.slot.is_empty()
            && cdc.slot.len() <= 63
            && cdc
                .slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_slot {
            return Err(invalid(format!(
                "replication slot name \"{}\" is not valid: use at most 63 lower-case letters, \
                 digits and underscores (name it with slot.name)",
                cdc.slot
            )));
        }
        if cdc.owns_publication {
            cdc.publication = cdc.slot.clone();
        }
        Ok(cdc)
    }

    /// The upstream table as SQL names it.
    pub fn qualified_table(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    /// A connection for queries, with [`SESSION_SETTINGS`].
    pub async fn connect(&self) -> WeirResult<Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("weir cdc")
            .connect_timeout(CONNECT_TIMEOUT);
        if !self.password.is_empty() {
            config.password(&self.password);
        }
        let (client, connection) = config.connect(NoTls).await.map_err(|e| {
            WeirError::new(
                SqlState("08001"),
                format!(
                    "could not connect to the upstream PostgreSQL at {}:{}: {e}",
                    self.host, self.port
                ),
            )
        })?;
        tokio::spawn(connection);
        let settings: String = SESSION_SETTINGS
            .iter()
            .map(|(name, value)| format!("SET {name} = '{value}'; "))
            .collect();
        client
            .batch_execute(&settings)
            .await
            .map_err(|e| upstream_error(&e))?;
        Ok(client)
    }

    /// A replication connection's settings: streaming from `start`,
    /// reporting `confirmed` as flushed until told more.
    pub fn replication(&self, start: u64, confirmed: u64) -> ReplicationConfig {
        let options: String = SESSION_SETTINGS
            .iter()
            .map(|(name, value)| format!("-c {name}={} ", value.replace(' ', "\\ ")))
            .collect();
        ReplicationConfig::new(
            self.host.clone(),
            self.user.clone(),
            self.password.clone(),
            self.database.clone(),
            self.slot.clone(),
            self.publication.as_str(),
        )
        .with_port(self.port)
        .with_start_lsn(Lsn::from_u64(start))
        .with_ack_lsn(Lsn::from_u64(confirmed))
        .with_status_interval(Duration::from_secs(1))
        .with_application_name("weir cdc")
        .with_options(options.trim_end().to_owned())
    }

    /// Checks what `CREATE TABLE` needs of the upstream server: logical
    /// decoding on, the table with `def`'s columns and primary key, no
    /// slot of the table's name yet; creates the publication when Weir
    /// owns it.
    pub async fn check_upstream(&self, def: &TableDef) -> WeirResult<()> {
        let client = self.connect().await?;
        let upstream = |e: tokio_postgres::Error| upstream_error(&e);
        let wal_level: String = client
            .query_one("SHOW wal_level", &[])
            .await
            .map_err(upstream)?
            .get(0);
        if wal_level != "logical" {
            return Err(WeirError::new(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("the upstream PostgreSQL has wal_level = {wal_level}"),
            )
            .with_hint(
                "Logical replication needs wal_level = logical (postgresql.conf, then a restart).",
            ));
        }
        let target = self.qualified_table();
        let columns = table_columns(&client, &target).await.map_err(upstream)?;
        if columns.is_empty() {
            return Err(WeirError::new(
                SqlState::UNDEFINED_TABLE,
                format!("the upstream table {target} does not exist"),
            ));
        }
        if let Some(missing) = def.columns.iter().find(|c| !columns.contains(&c.name)) {
            return Err(WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!(
                    "the upstream table {target} has no column \"{}\"",
                    missing.name
                ),
            ));
        }
        let mut upstream_key: Vec<String> = client
            .query(
                "SELECT a.attname::text FROM pg_index i JOIN pg_attribute a \
                   ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
                &[&target],
            )
            .await
            .map_err(upstream)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut key: Vec<String> = def
            .primary_key
            .iter()
            .map(|&i| def.columns[i].name.clone())
            .collect();
        upstream_key.sort();
        key.sort();
        if upstream_key.is_empty() || key != upstream_key {
            return Err(WeirError::new(
                SqlState::INVALID_TABLE_DEFINITION,
                format!(
                    "table \"{}\" must have the primary key of the upstream table {target} ({})",
                    def.name,
                    if upstream_key.is_empty() {
                        "it has none".to_owned()
                    } else {
                        upstream_key.join(", ")
                    }
                ),
            )
            .with_hint(
                "Changes are applied by key: declare the same PRIMARY KEY (the upstream table \
                 needs one).",
            ));
        }
        let slot_taken = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .map_err(upstream)?
            .is_some();
        if slot_taken {
            return Err(WeirError::new(
                SqlState("42710"),
                format!(
                    "the upstream PostgreSQL already has a replication slot \"{}\"",
                    self.slot
                ),
            )
            .with_hint("Name another with slot.name, or drop the old one upstream."));
        }
        let published: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_publication_tables \
                 WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)",
                &[&self.publication, &self.schema, &self.table],
            )
            .await
            .map_err(upstream)?
            .get(0);
        match (published, self.owns_publication) {
            (true, _) => Ok(()),
            (false, true) => client
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE {target}",
                    quote(&self.publication)
                ))
                .await
                .map_err(upstream),
            (false, false) => Err(WeirError::new(
                SqlState::UNDEFINED_OBJECT,
                format!(
                    "the upstream publication \"{}\" does not publish {target}",
                    self.publication
                ),
            )),
        }
    }
}

impl PostgresCdc {
    /// Drops the slot ([`PostgresCdc::drop_slot`]) and the publication
    /// Weir made.
    pub async fn drop_upstream(&self) -> WeirResult<()> {
        let client = self.connect().await?;
        self.drop_slot(&client).await?;
        if self.owns_publication {
            client
                .batch_execute(&format!(
                    "DROP PUBLICATION IF EXISTS {}",
                    quote(&self.publication)
                ))
                .await
                .map_err(|e| upstream_error(&e))?;
        }
        Ok(())
    }

    /// Drops the slot if it exists, ending the walsender that holds it
    /// (one of a crashed server's, or of an aborted task, that PostgreSQL
    /// has not noticed yet), retrying for a few seconds while it ends.
    pub async fn drop_slot(&self, client: &Client) -> WeirResult<()> {
        let mut attempt = 0;
        loop {
            let _ = client
                .execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
                     WHERE slot_name = $1 AND active_pid IS NOT NULL",
                    &[&self.slot],
                )
                .await;
            let dropped = client
                .execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                     WHERE slot_name = $1",
                    &[&self.slot],
                )
                .await;
            match dropped {
                Ok(_) => return Ok(()),
                Err(e) if attempt == 9 => return Err(upstream_error(&e)),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(100 << attempt.min(4))).await;
            attempt += 1;
        }
    }
}

/// An upstream query's failure as a Weir error with the upstream's
/// SQLSTATE, where it sent one.
pub(super) fn upstream_error(e: &tokio_postgres::Error) -> WeirError {
    let Some(db) = e.as_db_error() else {
        return WeirError::new(SqlState("08006"), format!("upstream PostgreSQL: {e}"));
    };
    // The upstream's classes users act on keep their code; others are
    // an error of the connection to it.
    let code = match db.code().code() {
        "42501" => SqlState("42501"),
        "53400" => SqlState("53400"),
        "55006" => SqlState("55006"),
        "42P01" => SqlState::UNDEFINED_TABLE,
        "42704" => SqlState::UNDEFINED_OBJECT,
        _ => SqlState::IO_ERROR,
    };
    WeirError::new(
        code,
        format!(
            "upstream PostgreSQL ({}): {}",
            db.code().code(),
            db.message()
        ),
    )
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
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
    fn defaults_name_the_slot_and_publication_after_the_table() {
        let cdc = PostgresCdc::parse("orders", &options(&[("hostname", "db")])).unwrap();
        assert_eq!(
            (cdc.slot.as_str(), cdc.publication.as_str()),
            ("weir_orders", "weir_orders")
        );
        assert!(cdc.owns_publication);
        assert_eq!(cdc.qualified_table(), "\"public\".\"orders\"");
        let given = PostgresCdc::parse(
            "t",
            &options(&[("publication.name", "pub"), ("table.name", "Orders")]),
        )
        .unwrap();
        assert!(!given.owns_publication);
        assert_eq!(given.qualified_table(), "\"public\".\"Orders\"");
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            options(&[("port", "x")]),
            options(&[("hostnam", "db")]),
            options(&[("slot.name", "Has-Dash")]),
        ] {
            let err = PostgresCdc::parse("t", &bad).unwrap_err();
            assert_eq!(err.code, SqlState::INVALID_PARAMETER_VALUE, "{err}");
        }
    }
}
