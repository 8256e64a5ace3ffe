//! Tables fed by PostgreSQL logical replication: `CREATE TABLE t (...,
//! PRIMARY KEY (...)) WITH (connector = 'postgres-cdc', ...)`.
//!
//! Such a table is an ordinary Weir table whose rows come from an
//! upstream PostgreSQL table instead of DML (which it refuses): first a
//! snapshot, then the upstream's inserts, updates and deletes, applied by
//! primary key. Views read it as they read any table, so every view over
//! it shares its one replication slot, and a view created later starts
//! from the table's rows like any view over a table.
//!
//! | file | job |
//! |---|---|
//! | `options.rs` | the `WITH` options, the connections, `CREATE TABLE`'s upstream checks |
//! | `pgoutput.rs` | decoding `pgoutput` row messages |
//! | `apply.rs` | changes netted by key and applied to the working state with their LSN |
//! | `ingest.rs` | one table's snapshot and stream, and confirming its slot |
//!
//! This file starts and stops one ingest task per such table of the
//! committed catalog and keeps each one's status (`weir_cdc_tables`);
//! `DROP TABLE` drops the slot (`PostgresCdc::drop_upstream`).

mod apply;
mod ingest;
mod options;
mod pgoutput;

pub use options::PostgresCdc;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::sql::sqlparser::ast::CreateTable;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;
use weir_state::TableId;

use crate::catalog::{relation_name, Catalog, ConnectorDef, TableDef};
use crate::database::Database;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// The connector name.
pub const POSTGRES_CDC: &str = "postgres-cdc";

/// The first wait after a failed ingest attempt.
const MIN_BACKOFF: Duration = Duration::from_millis(200);

/// The longest wait between attempts of a failing ingest.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Where one table's ingest stands, for `weir_cdc_tables`.
#[derive(Debug, Default, Clone)]
pub struct CdcState {
    /// `snapshot`, `streaming`, or `retrying` after a failure.
    pub phase: &'static str,
    /// The replication slot.
    pub slot: String,
    /// Rows copied by the snapshot.
    pub snapshot_rows: u64,
    /// Row changes applied since the server started.
    pub changes: u64,
    /// Upstream transactions applied since the server started.
    pub transactions: u64,
    /// The LSN the working state's rows have reached.
    pub applied_position: u64,
    /// The LSN the slot is confirmed to (that of the last committed
    /// epoch).
    pub confirmed_position: u64,
    /// Failed attempts since the server started.
    pub failures: u64,
    /// Why the last attempt failed, until one streams again.
    pub last_error: Option<String>,
}

/// One table's [`CdcState`], shared with its task.
#[derive(Debug, Default)]
pub struct CdcStatus(Mutex<CdcState>);

impl CdcStatus {
    fn update(&self, change: impl FnOnce(&mut CdcState)) {
        change(&mut self.0.lock().expect("cdc status lock"));
    }

    fn set_phase(&self, phase: &'static str) {
        self.update(|s| s.phase = phase);
    }
}

/// Every ingest's status, by table.
#[derive(Debug, Default)]
pub struct CdcStatuses(Mutex<HashMap<TableId, Arc<CdcStatus>>>);

impl CdcStatuses {
    /// Each table's status.
    pub fn all(&self) -> HashMap<TableId, CdcState> {
        self.0
            .lock()
            .expect("cdc statuses lock")
            .iter()
            .map(|(&id, status)| (id, status.0.lock().expect("cdc status lock").clone()))
            .collect()
    }

    fn insert(&self, id: TableId, status: Arc<CdcStatus>) {
        self.0.lock().expect("cdc statuses lock").insert(id, status);
    }

    fn remove(&self, id: TableId) {
        self.0.lock().expect("cdc statuses lock").remove(&id);
    }
}

/// `CREATE TABLE ... WITH (connector = 'postgres-cdc', ...)`: checks the
/// upstream (without holding the working lock: it may be slow to answer),
/// then creates the table; its ingest starts once the table is committed.
pub async fn create_table(
    session: &mut Session,
    create: &CreateTable,
    options: &[(String, String)],
) -> WeirResult<Output> {
    crate::ddl::check_table_options(create)?;
    let mut options = options.to_vec();
    let connector = match options.iter().position(|(k, _)| k == "connector") {
        Some(i) => options.remove(i).1,
        None => {
            return Err(WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                "a table's WITH options need connector = '...'",
            ))
        }
    };
    if connector != POSTGRES_CDC {
        return Err(WeirError::unsupported(format!(
            "connector \"{connector}\" cannot feed a table; tables take connector = \
             '{POSTGRES_CDC}' (for generated rows, CREATE SOURCE)"
        )));
    }
    let name = relation_name(&create.name)?;
    let db = session.db.clone();
    let cdc = PostgresCdc::parse(
        &name,
        &crate::secrets::resolve(&db, &db.committed().catalog, &options)?,
    )?;
    let def = {
        let working = db.working().await;
        if let Some(skipped) = crate::ddl::claim_table_name(session, &working.catalog, create)? {
            return Ok(skipped);
        }
        session.pinned.pin(Arc::new(db.working_snapshot(&working)));
        let memory = crate::ddl::plan_columns(session, create).await?;
        crate::ddl::table_def(session, create, &memory, false, None)?
    };
    if def.primary_key.is_empty() {
        return Err(WeirError::new(
            SqlState::INVALID_TABLE_DEFINITION,
            format!("table \"{name}\" needs a PRIMARY KEY: upstream changes are applied by key"),
        ));
    }
    if !def.unique.is_empty() {
        // An upstream transaction may pass through states that break it
        // (two rows trading values) as its changes are applied one by one.
        return Err(WeirError::unsupported(
            "UNIQUE constraints on a table a connector feeds (the upstream table enforces its own)",
        ));
    }
    cdc.check_upstream(&def).await?;
    let mut working = db.working().await;
    // Taken meanwhile?
    if let Some(skipped) = crate::ddl::claim_table_name(session, &working.catalog, create)? {
        return Ok(skipped);
    }
    working.create_table(TableDef {
        connector: Some(ConnectorDef { connector, options }),
        ..def
    })?;
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("CREATE TABLE"))
}

/// The `postgres-cdc` settings of a table of `catalog` a connector feeds,
/// with the secrets its options name.
fn connector_of(
    db: &Database,
    catalog: &Catalog,
    def: &TableDef,
) -> Option<WeirResult<PostgresCdc>> {
    let connector = def.connector.as_ref()?;
    Some(
        crate::secrets::resolve(db, catalog, &connector.options)
            .and_then(|options| PostgresCdc::parse(&def.name, &options)),
    )
}

/// The upstream of table `def` of `catalog`, if a connector feeds it (and
/// its options read).
pub fn upstream_of(db: &Database, catalog: &Catalog, def: &TableDef) -> Option<PostgresCdc> {
    connector_of(db, catalog, def)?.ok()
}

/// Runs until `shutdown` turns true: an ingest task for every table of
/// the committed catalog that a connector feeds, started and stopped as
/// such tables are created and dropped.
pub async fn run_ingests(
    db: Arc<Database>,
    runtime: Arc<RuntimeEnv>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut committed = db.subscribe_committed();
    let mut tasks: HashMap<TableId, JoinHandle<()>> = HashMap::new();
    loop {
        let catalog = db.committed().catalog.clone();
        let fed: HashMap<TableId, &TableDef> = catalog
            .tables
            .values()
            .filter(|def| def.connector.is_some())
            .map(|def| (def.id, def))
            .collect();
        // A dropped table's task stops; `DROP TABLE` drops its slot.
        tasks.retain(|id, task| {
            if fed.contains_key(id) {
                return true;
            }
            task.abort();
            db.cdc.remove(*id);
            false
        });
        for (&id, def) in &fed {
            if tasks.contains_key(&id) {
                continue;
            }
            let cdc = match connector_of(&db, &catalog, def) {
                Some(Ok(cdc)) => cdc,
                Some(Err(e)) => {
                    warn!(table = %def.name, error = %e, "unreadable connector options");
                    let status = Arc::new(CdcStatus::default());
                    status.update(|s| {
                        s.phase = "retrying";
                        s.last_error = Some(e.to_string());
                    });
                    db.cdc.insert(id, status);
                    continue;
                }
                None => continue,
            };
            let status = Arc::new(CdcStatus::default());
            status.update(|s| s.slot = cdc.slot.clone());
            db.cdc.insert(id, status.clone());
            let task = tokio::spawn(run_ingest(
                db.clone(),
                runtime.clone(),
                (*def).clone(),
                cdc,
                status,
            ));
            tasks.insert(id, task);
        }
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
    for task in tasks.values() {
        task.abort();
    }
}

/// Ingests one table, retrying with backoff after each failure.
async fn run_ingest(
    db: Arc<Database>,
    runtime: Arc<RuntimeEnv>,
    def: TableDef,
    cdc: PostgresCdc,
    status: Arc<CdcStatus>,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let started = std::time::Instant::now();
        let outcome = match Session::new(db.clone(), runtime.clone(), "weir".into()) {
            Ok(session) => ingest::ingest(&db, &session, &def, &cdc, &status).await,
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            warn!(table = %def.name, error = %e, "postgres-cdc ingest failed; retrying");
            status.update(|s| {
                s.phase = "retrying";
                s.failures += 1;
                s.last_error = Some(e.to_string());
            });
        }
        if started.elapsed() > MAX_BACKOFF * 3 {
            // It ran a good while: a new failure, not the same one again.
            backoff = MIN_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
