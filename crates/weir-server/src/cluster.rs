//! A cluster's other processes: they serve no clients and hold no state
//! store; they run their timely workers' share of every partitioned view,
//! which they plan again from the definition process 0 sends (the
//! catalog as of the view's start and its query), with the same planner
//! as process 0.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::runtime_env::RuntimeEnv;
use serde::{Deserialize, Serialize};
use weir_state::TableSnapshot;
use weir_stream::runtime::{BuiltView, ClusterConfig, ViewBuilder};

use crate::catalog::Catalog;
use crate::database::DbSnapshot;
use crate::error::{WeirError, WeirResult};
use crate::provider::PinnedSnapshot;

/// What another process needs to plan a view as process 0 did.
#[derive(Serialize, Deserialize)]
struct ViewDefinition {
    catalog: Catalog,
    query: String,
    #[serde(default)]
    emit_on_window_close: bool,
}

/// The definition of a view reading `query` with `catalog`, as
/// [`Planner`] reads it.
pub fn view_definition(
    catalog: &Catalog,
    query: &str,
    emit_on_window_close: bool,
) -> WeirResult<String> {
    serde_json::to_string(&ViewDefinition {
        catalog: catalog.clone(),
        query: query.to_owned(),
        emit_on_window_close,
    })
    .map_err(WeirError::internal)
}

/// Plans views in a process without a database.
pub struct Planner {
    runtime: Arc<RuntimeEnv>,
}

impl Planner {
    /// A planner with DataFusion's default runtime (planning allocates no
    /// query memory).
    pub fn new() -> Self {
        Planner {
            runtime: Arc::new(RuntimeEnv::default()),
        }
    }
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

impl ViewBuilder for Planner {
    fn build(&self, definition: &str) -> datafusion::error::Result<BuiltView> {
        let definition: ViewDefinition = serde_json::from_str(definition)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let catalog = Arc::new(definition.catalog);
        // The planner needs the tables' schemas, not their rows.
        let tables = catalog
            .tables
            .values()
            .map(|table| {
                let spec = table.spec();
                let rows = RecordBatch::new_empty(spec.schema.clone());
                (table.id, TableSnapshot::from_rows(spec, rows))
            })
            .collect();
        let snapshot = DbSnapshot {
            epoch: 0,
            catalog: catalog.clone(),
            tables,
            operator_rows: Default::default(),
            offsets: BTreeMap::new(),
        };
        let pinned = Arc::new(PinnedSnapshot::new(Arc::new(snapshot)));
        let planned = futures::executor::block_on(async {
            let ctx = crate::session::session_context(
                self.runtime.clone(),
                pinned,
                None,
                "weir",
                &Default::default(),
            )?;
            let query = crate::mview::parse_query(&definition.query)?;
            crate::mview::plan_view_in(
                &ctx.state(),
                &catalog,
                &query,
                &[],
                definition.emit_on_window_close,
            )
            .await
        })
        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        let mut sources = BTreeMap::new();
        for name in &planned.sources {
            if let Some(def) = catalog.sources.get(name) {
                if crate::file_source::is_file_source(def) {
                    return Err(datafusion::error::DataFusionError::NotImplemented(format!(
                        "source \"{name}\" reads files, which one process lists and logs: \
                         a view over it cannot run in a cluster"
                    )));
                }
                if def.names_secrets() {
                    return Err(datafusion::error::DataFusionError::NotImplemented(format!(
                        "source \"{name}\" names secrets, which only process 0 opens: \
                         a view over it cannot run in a cluster"
                    )));
                }
                let connector = def
                    .connector_with(&def.options, None)
                    .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
                sources.insert(name.clone(), connector);
            }
        }
        Ok(BuiltView {
            plan: planned.plan,
            sources,
        })
    }
}

/// Runs process `cluster.process` (not 0) of a cluster with `workers`
/// timely workers, whose source readers read at most `epoch_read_limit`
/// bytes into an epoch, until process 0 shuts the cluster down.
pub fn serve_process(
    workers: usize,
    epoch_read_limit: usize,
    cluster: &ClusterConfig,
) -> WeirResult<()> {
    let tokio = tokio::runtime::Handle::current();
    let planner = Arc::new(Planner::new());
    weir_stream::runtime::serve_process(workers, epoch_read_limit, cluster, planner, tokio)
        .map_err(WeirError::from_datafusion)
}
