//! `CREATE SOURCE`, `SHOW SOURCES`, and reading a source outside a view.
//!
//! A source's rows are not stored: each materialized view that reads a
//! source gets a reader of its own (`reader.rs`) that starts at the
//! source's first row, and the reader's position is checkpointed with the
//! view. So a view over a source always holds its query over the rows
//! `0..position`, however often the server restarts.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session as DfSession, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::sqlparser::ast::CreateTable;

use weir_connectors::Connector;

use crate::catalog::{relation_name, ColumnDef, SourceDef};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// `CREATE SOURCE [IF NOT EXISTS] name (columns) WITH (connector = ..., ...)`.
pub async fn create(
    session: &mut Session,
    create: &CreateTable,
    options: &[(String, String)],
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<Output> {
    let name = relation_name(&create.name)?;
    let column_options = create.columns.iter().any(|c| !c.options.is_empty());
    if create.query.is_some() || !create.constraints.is_empty() || column_options {
        return Err(WeirError::unsupported(
            "CREATE SOURCE takes column names and types and WITH options only (no keys, constraints or defaults)",
        ));
    }
    let mut options: BTreeMap<String, String> = options.iter().cloned().collect();
    let known = || Connector::ALL.map(Connector::name).join(", ");
    let name_given = options.remove("connector").ok_or_else(|| {
        WeirError::new(
            SqlState("22023"),
            format!(
                "CREATE SOURCE needs WITH (connector = '...'); connectors: {}",
                known()
            ),
        )
    })?;
    let connector = Connector::named(&name_given).ok_or_else(|| {
        WeirError::unsupported(format!(
            "connector \"{name_given}\" is not supported; connectors: {}",
            known()
        ))
    })?;
    if let Some(key) = options.keys().find_map(|key| weir_sql::referenced_key(key)) {
        if !matches!(connector, Connector::Kafka | Connector::Files) {
            return Err(WeirError::unsupported(format!(
                "a {} source takes no secrets (option \"{key}\"); Kafka and file sources do",
                connector.name()
            )));
        }
    }
    if connector == Connector::Files && session.db.is_cluster() {
        return Err(WeirError::unsupported(
            "file sources are read by one process: their files are listed and logged by process 0",
        ));
    }
    // Ask the outside system (once the statement is otherwise whole)
    // before taking the catalog's lock.
    let splits = match connector {
        Connector::Kafka if !create.columns.is_empty() => {
            let pairs: Vec<(String, String)> = options.clone().into_iter().collect();
            let db = &session.db;
            let resolved = crate::secrets::resolve(db, &db.committed().catalog, &pairs)?;
            Some(kafka_partitions(&resolved.into_iter().collect()).await?)
        }
        _ => None,
    };
    let db = session.db.clone();
    let mut working = db.working().await;
    if let Some(skipped) = crate::ddl::claim_name(
        session,
        &working.catalog,
        &name,
        create.if_not_exists,
        "CREATE SOURCE",
    )? {
        return Ok(skipped);
    }
    session.pinned.pin(Arc::new(db.working_snapshot(&working)));
    let schema = match connector.default_schema(&options) {
        // The connector knows the columns: the list may be left out.
        Some(schema) if create.columns.is_empty() => {
            schema.map_err(|e| WeirError::new(SqlState("22023"), e.to_string()))?
        }
        None if create.columns.is_empty() => {
            return Err(WeirError::new(
                SqlState("42P16"),
                if connector.generates() {
                    format!(
                        "a {} source needs a column list: its columns are what it generates",
                        connector.name()
                    )
                } else {
                    format!(
                        "a {} source needs a column list: its columns are what it decodes",
                        connector.name()
                    )
                },
            ));
        }
        _ => crate::ddl::plan_columns(session, create)
            .await?
            .input
            .schema()
            .inner()
            .clone(),
    };
    // Records' metadata (`INCLUDE`) after the declared columns.
    let included = connector
        .included_columns(&options)
        .map_err(|e| WeirError::new(SqlState("22023"), e.to_string()))?;
    for field in &included {
        if schema.field_with_name(field.name()).is_ok()
            || included.iter().filter(|f| f.name() == field.name()).count() > 1
        {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{}\" specified more than once", field.name()),
            ));
        }
    }
    let columns = schema
        .fields()
        .iter()
        .map(|field| field.as_ref())
        .chain(&included)
        .map(|field| ColumnDef {
            display_scale: None,
            identity: None,
            name: field.name().clone(),
            data_type: crate::ddl::storage_type(field.data_type()),
            // Generated values are never NULL; records may lack a field.
            nullable: !connector.generates(),
            default: None,
            max_chars: None,
            declared: crate::varchar::declared(field).or(crate::uuid_type::declared(field)),
            json: crate::json::JsonKind::of(field),
        })
        .collect::<Vec<_>>();
    let watermark = watermark
        .map(|clause| crate::event_time::watermark_def(session, &columns, clause))
        .transpose()?;
    let def = SourceDef {
        watermark,
        id: working.catalog.next_table_id,
        name: name.clone(),
        columns,
        connector: connector.name().to_owned(),
        options,
        created_micros: chrono::Utc::now().timestamp_micros(),
        generator_version: connector.generator_version(),
        splits,
    };
    // Refuse bad options (and missing secrets) now rather than when a
    // view first reads it.
    def.connector(&db, &working.catalog)?;
    if crate::file_source::is_file_source(&def) {
        crate::file_source::create_log(&mut working, &def)?;
    }
    working.catalog.next_table_id += 1;
    working.catalog.sources.insert(name, def);
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("CREATE SOURCE"))
}

/// How many partitions a Kafka source's topic has (08001 when no broker
/// answers, 42704 when the topic does not exist).
async fn kafka_partitions(options: &BTreeMap<String, String>) -> WeirResult<u32> {
    use weir_connectors::kafka::{self, MetadataError};
    let options = kafka::KafkaOptions::parse(options)
        .map_err(|e| WeirError::new(SqlState::INVALID_PARAMETER_VALUE, e))?;
    let found = tokio::task::spawn_blocking(move || kafka::partitions(&options))
        .await
        .map_err(|e| WeirError::new(SqlState::INTERNAL_ERROR, e.to_string()))?;
    found.map_err(|e| {
        let state = match e {
            MetadataError::Unreachable { .. } => SqlState("08001"),
            MetadataError::NoTopic(_) => SqlState::UNDEFINED_OBJECT,
        };
        WeirError::new(state, e.to_string())
    })
}

/// `SHOW SOURCES`: name, connector and options of every source.
pub fn show(session: &Session) -> WeirResult<Output> {
    let catalog = session.db.committed().catalog.clone();
    let mut names = Vec::new();
    let mut connectors = Vec::new();
    let mut options = Vec::new();
    for def in catalog.sources.values() {
        names.push(def.name.clone());
        connectors.push(def.connector.clone());
        options.push(
            def.options
                .iter()
                .map(|(k, v)| match weir_sql::referenced_key(k) {
                    Some(option) => format!("{option} = SECRET {v}"),
                    None => format!("{k} = '{v}'"),
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    Output::text_columns(
        &["name", "connector", "options"],
        vec![names, connectors, options],
    )
}

/// What a query that names a source plans against: the source's columns.
/// Planning a materialized view needs them; running a plain query over an
/// unbounded source is refused.
#[derive(Debug)]
pub struct SourceTable {
    name: String,
    schema: SchemaRef,
}

impl SourceTable {
    /// The provider for `def`.
    pub fn new(def: &SourceDef) -> Self {
        SourceTable {
            name: def.name.clone(),
            schema: def.schema(),
        }
    }
}

#[async_trait]
impl TableProvider for SourceTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn DfSession,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let error = WeirError::unsupported(format!(
            "source \"{}\" cannot be read directly; create a materialized view over it and read that",
            self.name
        ));
        Err(DataFusionError::External(Box::new(error)))
    }
}
