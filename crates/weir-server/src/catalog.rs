//! The catalog: tables and plain views, saved in every manifest.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::ObjectName;
use serde::{Deserialize, Serialize};
use weir_state::{TableId, TableSpec};
use weir_stream::runtime::COUNT_COLUMN;

use crate::error::{SqlState, WeirError, WeirResult};

/// The only schema Weir has; names may be qualified with it.
pub const SCHEMA: &str = "public";
/// The database name clients see (`current_database()`, `\l`).
pub const DATABASE: &str = "weir";

/// Every table and view, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// The id the next created table gets.
    pub next_table_id: TableId,
    /// Tables by name.
    pub tables: BTreeMap<String, TableDef>,
    /// Plain views by name.
    pub views: BTreeMap<String, ViewDef>,
    /// Materialized views by name.
    #[serde(default)]
    pub materialized_views: BTreeMap<String, MaterializedViewDef>,
    /// Sources by name.
    #[serde(default)]
    pub sources: BTreeMap<String, SourceDef>,
    /// Indexes (`CREATE INDEX`) by name.
    #[serde(default)]
    pub indexes: BTreeMap<String, IndexDef>,
    /// Secrets (`CREATE SECRET`) by name, sealed.
    #[serde(default)]
    pub secrets: BTreeMap<String, crate::secrets::SecretDef>,
    /// Sequences (`CREATE SEQUENCE`, `SERIAL` and identity columns) by
    /// name; their values are not here (`sequences/mod.rs`).
    #[serde(default)]
    pub sequences: BTreeMap<String, crate::sequences::SequenceDef>,
}

/// An index on a table or materialized view: an order of its rows by some
/// of its columns that lookups read (`lookup.rs`). Its content is not
/// stored: each chunk of the relation's rows sorts itself by the index's
/// columns when a lookup first needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Stable id (from the same sequence as tables): its OID derives from it.
    pub id: TableId,
    /// Its name.
    pub name: String,
    /// The table or materialized view it indexes.
    pub relation: String,
    /// Its columns, as indices into the relation's columns.
    pub columns: Vec<usize>,
}

/// A source: rows the server generates or pulls, read by materialized
/// views and never stored as a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceDef {
    /// Stable id (from the same sequence as tables).
    pub id: TableId,
    /// Its name.
    pub name: String,
    /// Its columns.
    pub columns: Vec<ColumnDef>,
    /// The connector (`datagen` or `nexmark`).
    pub connector: String,
    /// The connector's options, keys lowercased.
    pub options: BTreeMap<String, String>,
    /// When it was created (unix microseconds): the base of event-time
    /// columns, so that every reader generates the same rows.
    pub created_micros: i64,
    /// The version of the generator it was created with (see the
    /// connector's `GENERATOR_VERSION`); 1 for sources created before
    /// versions were recorded.
    #[serde(default = "first_generator_version")]
    pub generator_version: u32,
    /// `WATERMARK FOR`, if declared.
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
    /// How many splits it is read through, where the connector asked
    /// another system when the source was created (a Kafka topic's
    /// partitions); generators fix their own.
    #[serde(default)]
    pub splits: Option<u32>,
}

/// A relation's `WATERMARK FOR col AS col - delay`: rows whose `col` is
/// below the greatest `col` read minus `delay` are late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatermarkDef {
    /// The event-time column.
    pub column: usize,
    /// The delay, in the unit of the column's values (microseconds for
    /// `timestamp`).
    pub delay: i64,
    /// The clause's expression as written, for display.
    pub expr: String,
}

fn first_generator_version() -> u32 {
    1
}

impl SourceDef {
    /// The source's schema.
    pub fn schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    /// The connector that reads it, for the stream runtime, with the
    /// values of the secrets its options name; an error if a secret
    /// cannot be opened or its options no longer validate.
    pub fn connector(
        &self,
        db: &crate::database::Database,
        catalog: &Catalog,
    ) -> WeirResult<Arc<dyn weir_stream::runtime::Source>> {
        let letters = crate::dead_letters::all(db).folder(self.id);
        self.connector_with(&self.resolved_options(db, catalog)?, Some(letters))
    }

    /// Its options with the values of the secrets they name, as a
    /// connector connects with them.
    pub fn resolved_options(
        &self,
        db: &crate::database::Database,
        catalog: &Catalog,
    ) -> WeirResult<BTreeMap<String, String>> {
        let options: Vec<(String, String)> = self.options.clone().into_iter().collect();
        Ok(crate::secrets::resolve(db, catalog, &options)?
            .into_iter()
            .collect())
    }

    /// Whether its connector decodes records from another system (Kafka,
    /// files) rather than generating rows.
    pub fn decodes_records(&self) -> bool {
        weir_connectors::Connector::named(&self.connector).is_some_and(|c| !c.generates())
    }

    /// Whether its options name a secret.
    pub fn names_secrets(&self) -> bool {
        self.options
            .keys()
            .any(|key| weir_sql::referenced_key(key).is_some())
    }

    /// The connector that reads it with `options` (its own, secrets'
    /// values in place of their references), its dead letters (if it keeps
    /// them) in `dead_letters`.
    pub fn connector_with(
        &self,
        options: &BTreeMap<String, String>,
        dead_letters: Option<weir_connectors::dead_letters::DeadLetterBox>,
    ) -> WeirResult<Arc<dyn weir_stream::runtime::Source>> {
        let connector = weir_connectors::Connector::named(&self.connector).ok_or_else(|| {
            WeirError::unsupported(format!("connector \"{}\" is not supported", self.connector))
        })?;
        connector
            .source(
                self.schema(),
                options,
                weir_connectors::SourceSetup {
                    id: self.id,
                    created_micros: self.created_micros,
                    version: self.generator_version,
                    splits: self.splits,
                    dead_letters,
                },
            )
            .map_err(|e| WeirError::new(SqlState("22023"), e.to_string()))
    }
}

/// Why a materialized view stopped being maintained: the error that
/// stopped it, which reads of the view report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "FailureRecord")]
pub struct ViewFailure {
    /// What went wrong.
    pub message: String,
    /// The error's SQLSTATE.
    pub sqlstate: String,
    /// What the user can do about it.
    pub hint: Option<String>,
}

impl ViewFailure {
    /// The failure `error` caused.
    pub fn from_error(error: &WeirError) -> Self {
        ViewFailure {
            message: error.message.clone(),
            sqlstate: error.code.0.to_owned(),
            hint: error.hint.clone(),
        }
    }

    /// The failure the stream runtime reported.
    pub fn from_reason(reason: weir_stream::runtime::FailureReason) -> Self {
        match reason {
            weir_stream::runtime::FailureReason::Error(e) => {
                ViewFailure::from_error(&WeirError::from_datafusion(e))
            }
            other => ViewFailure::other(other.to_string()),
        }
    }

    /// A failure with a message only (SQLSTATE 55000, object not in
    /// prerequisite state).
    pub fn other(message: impl Into<String>) -> Self {
        ViewFailure {
            message: message.into(),
            sqlstate: "55000".to_owned(),
            hint: None,
        }
    }
}

/// Catalogs written before failures had a SQLSTATE hold only the message.
#[derive(Deserialize)]
#[serde(untagged)]
enum FailureRecord {
    Message(String),
    Full {
        message: String,
        sqlstate: String,
        hint: Option<String>,
    },
}

impl From<FailureRecord> for ViewFailure {
    fn from(record: FailureRecord) -> Self {
        match record {
            FailureRecord::Message(message) => ViewFailure::other(message),
            FailureRecord::Full {
                message,
                sqlstate,
                hint,
            } => ViewFailure {
                message,
                sqlstate,
                hint,
            },
        }
    }
}

/// A materialized view: its query, its output table and its operators'
/// state tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaterializedViewDef {
    /// The view's name.
    pub name: String,
    /// The defining query as SQL text; planned again at recovery.
    pub query: String,
    /// The output columns.
    pub columns: Vec<ColumnDef>,
    /// The state table holding the view's rows (with their counts).
    /// Views are created in increasing id order, so a view's sources
    /// always have smaller ids.
    pub id: TableId,
    /// The operators' state tables, in dataflow order.
    pub state_ids: Vec<TableId>,
    /// The tables and materialized views it reads directly, and the
    /// plain views its query names.
    pub depends_on: Vec<String>,
    /// Why the view stopped being maintained, if it did.
    pub failed: Option<ViewFailure>,
    /// Whether its rows are only ever inserted (views reading it may keep
    /// less state).
    #[serde(default)]
    pub append_only: bool,
    /// Columns no two of its rows share, which key its output table;
    /// `None`: the rows are stored with a count, keyed by all columns.
    #[serde(default)]
    pub key: Option<Vec<usize>>,
    /// Further orders its rows can be looked up by, not unique: a join's
    /// keys, a top-N's `ORDER BY` (`StreamPlan::output_lookup_orders`).
    #[serde(default)]
    pub lookup_orders: Vec<Vec<usize>>,
    /// `EMIT ON WINDOW CLOSE`: its windows' rows appear once, final.
    #[serde(default)]
    pub emit_on_window_close: bool,
    /// Set for a sink (`CREATE SINK`): its output goes to its connector,
    /// and its output table stays empty.
    #[serde(default)]
    pub sink: Option<ConnectorDef>,
    /// The watermark views reading it get: a column that passes on its
    /// input's watermarked column as is, in an output that only inserts
    /// (see `StreamPlan::output_watermark`).
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
}

/// A connector and its options: where a sink's output goes, or where a
/// table's rows come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorDef {
    /// The connector (`blackhole`, `postgres-cdc`).
    pub connector: String,
    /// The options of `WITH (...)`, but the connector.
    pub options: Vec<(String, String)>,
}

impl MaterializedViewDef {
    /// The Arrow schema users see.
    pub fn schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    /// The output state table: see [`view_output_spec`].
    pub fn spec(&self) -> TableSpec {
        view_output_spec(&self.columns, self.key.as_deref())
    }
}

/// The output table of a view with `columns`: keyed by `key`, the columns
/// the planner found unique; or, without one, the columns plus a count,
/// keyed by all the columns (a view may then hold equal rows; they are
/// stored once).
pub fn view_output_spec(columns: &[ColumnDef], key: Option<&[usize]>) -> TableSpec {
    let schema = columns_schema(columns);
    if let Some(key) = key {
        return TableSpec::with_primary_key(schema, key.to_vec());
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(COUNT_COLUMN, DataType::Int64, false));
    TableSpec::with_primary_key(Arc::new(Schema::new(fields)), (0..columns.len()).collect())
}

fn columns_schema(columns: &[ColumnDef]) -> SchemaRef {
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| {
            let field = Field::new(&c.name, c.data_type.clone(), c.nullable);
            match c.json {
                Some(kind) => field.with_metadata(kind.metadata()),
                None => match c.declared.map(|d| d.oid) {
                    Some(crate::varchar::OID) => field.with_metadata(crate::varchar::metadata()),
                    Some(crate::uuid_type::OID) => crate::uuid_type::tag(field),
                    _ => field,
                },
            }
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// A table's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    /// Stable id; state files are filed under it.
    pub id: TableId,
    /// The table's name.
    pub name: String,
    /// Columns in order.
    pub columns: Vec<ColumnDef>,
    /// Indices of the primary key columns; empty for a table keyed by a
    /// hidden row id.
    pub primary_key: Vec<usize>,
    /// `APPEND ONLY`: rows are only ever inserted.
    #[serde(default)]
    pub append_only: bool,
    /// `WATERMARK FOR`, if declared (append-only tables only).
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
    /// The connector that feeds the table (`postgres-cdc`), for a table
    /// whose rows come from upstream rather than from DML.
    #[serde(default)]
    pub connector: Option<ConnectorDef>,
    /// `UNIQUE` constraints besides the primary key.
    #[serde(default)]
    pub unique: Vec<UniqueDef>,
}

/// A `UNIQUE` constraint: no two rows share its columns' values (rows
/// with a NULL in them excepted), enforced by every write
/// (`weir-state` `unique.rs`) and shown as a constraint and its index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UniqueDef {
    /// Stable id (from the same counter as tables): its OIDs derive from
    /// it.
    pub id: TableId,
    /// The constraint's name, and its index's (`<table>_<columns>_key`
    /// unless given).
    pub name: String,
    /// Its columns, as indices into the table's.
    pub columns: Vec<usize>,
}

/// A column's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// Column name.
    pub name: String,
    /// Arrow type of the stored values.
    pub data_type: DataType,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// The `DEFAULT` expression as SQL text.
    pub default: Option<String>,
    /// The length limit of `varchar(n)` / `char(n)`, in characters.
    #[serde(default)]
    pub max_chars: Option<u64>,
    /// `json` or `jsonb`, for a column of JSON text.
    #[serde(default)]
    pub json: Option<crate::json::JsonKind>,
    /// The PostgreSQL type the column was declared with, where its Arrow
    /// type does not say (`varchar(20)`, `numeric(10,2)`): what
    /// `pg_attribute` reports.
    #[serde(default)]
    pub declared: Option<DeclaredType>,
    /// How its `numeric` values are written, where not with its type's
    /// scale (`numeric_display.rs`): with their significant digits for a
    /// table's unconstrained `numeric`, with PostgreSQL's display scale
    /// for a view's column.
    #[serde(default)]
    pub display_scale: Option<crate::numeric_display::DisplayScale>,
    /// Set for an identity column (`GENERATED ... AS IDENTITY`).
    #[serde(default)]
    pub identity: Option<crate::sequences::ddl::Identity>,
}

/// A column's PostgreSQL type as declared: its `pg_type` OID and type
/// modifier (`atttypmod`: -1 for none, `n + 4` for `varchar(n)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredType {
    /// The type's OID.
    pub oid: u32,
    /// The type modifier.
    pub typmod: i32,
}

impl ColumnDef {
    /// Whether the column was declared `uuid` (its values are uuids'
    /// canonical text, `uuid_type.rs`).
    pub fn is_uuid(&self) -> bool {
        self.declared
            .is_some_and(|d| d.oid == crate::uuid_type::OID)
    }

    /// The column's PostgreSQL type name.
    pub fn type_name(&self) -> String {
        match (self.json, self.declared.map(|d| d.oid)) {
            (Some(kind), _) => kind.name().to_owned(),
            (None, Some(crate::varchar::OID)) => "character varying".to_owned(),
            (None, Some(crate::uuid_type::OID)) => "uuid".to_owned(),
            (None, _) => crate::types::pg_type_name(&self.data_type),
        }
    }
}

/// A plain view: its query is planned again each time it is read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewDef {
    /// The view's name.
    pub name: String,
    /// The defining query as SQL text.
    pub query: String,
    /// Column names given in `CREATE VIEW v (a, b)`, if any.
    pub columns: Vec<String>,
}

impl TableDef {
    /// The Arrow schema users see.
    pub fn schema(&self) -> SchemaRef {
        columns_schema(&self.columns)
    }

    /// The state table shape for this definition.
    pub fn spec(&self) -> TableSpec {
        let spec = if self.primary_key.is_empty() {
            TableSpec::with_row_id(self.schema())
        } else {
            TableSpec::with_primary_key(self.schema(), self.primary_key.clone())
        };
        spec.with_unique(self.unique.iter().map(|u| u.columns.clone()).collect())
    }

    /// Index of a column by name.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// What a name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A table.
    Table,
    /// A plain view.
    View,
    /// A materialized view.
    MaterializedView,
    /// A source.
    Source,
    /// A sink: a view whose output goes to a connector.
    Sink,
    /// A sequence.
    Sequence,
}

impl Catalog {
    /// Every (materialized view, source it reads), with the key of its
    /// split positions in a checkpoint (`runtime::position_key`).
    pub fn view_sources(&self) -> Vec<(&MaterializedViewDef, &SourceDef, String)> {
        let mut pairs = Vec::new();
        for view in self.materialized_views.values() {
            for source in view.depends_on.iter().filter_map(|d| self.sources.get(d)) {
                let key = weir_stream::runtime::position_key(view.id, source.id);
                pairs.push((view, source, key));
            }
        }
        pairs
    }

    /// A new id from the counter tables, views, indexes, sequences and
    /// constraints share (their state and OIDs are filed under it).
    pub fn take_id(&mut self) -> TableId {
        let id = self.next_table_id;
        self.next_table_id += 1;
        id
    }

    /// Whether an index is named `name`: one made with `CREATE INDEX`, or
    /// a `UNIQUE` constraint's (index names share the relations' space).
    pub fn names_index(&self, name: &str) -> bool {
        self.indexes.contains_key(name)
            || self
                .tables
                .values()
                .any(|t| t.unique.iter().any(|u| u.name == name))
    }

    /// What `name` is, if anything.
    pub fn kind_of(&self, name: &str) -> Option<ObjectKind> {
        if self.tables.contains_key(name) || crate::system::SYSTEM_TABLES.contains(&name) {
            Some(ObjectKind::Table)
        } else if self.views.contains_key(name) {
            Some(ObjectKind::View)
        } else if let Some(view) = self.materialized_views.get(name) {
            Some(match view.sink {
                Some(_) => ObjectKind::Sink,
                None => ObjectKind::MaterializedView,
            })
        } else if self.sources.contains_key(name) {
            Some(ObjectKind::Source)
        } else if self.sequences.contains_key(name) {
            Some(ObjectKind::Sequence)
        } else {
            None
        }
    }

    /// The declared columns of the table, materialized view or source
    /// `name` (a plain view keeps none).
    pub fn columns_of(&self, name: &str) -> Option<&[ColumnDef]> {
        let view = || {
            self.materialized_views
                .get(name)
                .map(|v| v.columns.as_slice())
        };
        let source = || self.sources.get(name).map(|s| s.columns.as_slice());
        self.tables
            .get(name)
            .map(|t| t.columns.as_slice())
            .or_else(view)
            .or_else(source)
    }

    /// The table called `name`, or a 42P01 / 42809 error.
    pub fn table(&self, name: &str) -> WeirResult<&TableDef> {
        match self.tables.get(name) {
            Some(t) => Ok(t),
            None if crate::system::SYSTEM_TABLES.contains(&name) => Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is a system table and cannot be changed"),
            )),
            None if self.views.contains_key(name) => Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is a view, not a table"),
            )),
            None if self.materialized_views.contains_key(name) => Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("cannot change materialized view \"{name}\""),
            )),
            None if self.sources.contains_key(name) => Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("cannot change source \"{name}\"; its rows come from its connector"),
            )),
            None => Err(undefined_relation(name)),
        }
    }

    /// The orders the rows of table or materialized view `name` can be
    /// looked up by: its primary key or view key (unique), a view's
    /// lookup orders (named after their columns: `top_by_price`), then
    /// its indexes.
    pub fn orders(&self, name: &str) -> Vec<crate::lookup::Order> {
        let key = match (self.tables.get(name), self.materialized_views.get(name)) {
            (Some(table), _) if !table.primary_key.is_empty() => Some(crate::lookup::Order {
                name: format!("{name}_pkey"),
                columns: table.primary_key.clone(),
            }),
            (_, Some(view)) => view.key.clone().map(|columns| crate::lookup::Order {
                name: format!("{name}_key"),
                columns,
            }),
            _ => None,
        };
        let view_orders = self
            .materialized_views
            .get(name)
            .into_iter()
            .flat_map(|view| {
                view.lookup_orders.iter().map(|columns| {
                    let names: Vec<&str> = columns
                        .iter()
                        .map(|&c| view.columns[c].name.as_str())
                        .collect();
                    crate::lookup::Order {
                        name: format!("{name}_by_{}", names.join("_")),
                        columns: columns.clone(),
                    }
                })
            });
        let indexes = self
            .indexes
            .values()
            .filter(|i| i.relation == name)
            .map(|i| crate::lookup::Order {
                name: i.name.clone(),
                columns: i.columns.clone(),
            });
        key.into_iter().chain(view_orders).chain(indexes).collect()
    }

    /// Names of every relation a query can read (tables, views, sources;
    /// not sinks).
    pub fn relation_names(&self) -> Vec<String> {
        let readable_views = self
            .materialized_views
            .values()
            .filter(|v| v.sink.is_none())
            .map(|v| &v.name);
        self.tables
            .keys()
            .chain(self.views.keys())
            .chain(readable_views)
            .chain(self.sources.keys())
            .cloned()
            .collect()
    }
}

/// The 42P01 error PostgreSQL gives for a missing relation.
pub fn undefined_relation(name: &str) -> WeirError {
    WeirError::new(
        SqlState::UNDEFINED_TABLE,
        format!("relation \"{name}\" does not exist"),
    )
}

/// The relation name an `ObjectName` refers to: PostgreSQL folds unquoted
/// identifiers to lower case, and the only schema is `public`.
pub fn relation_name(name: &ObjectName) -> WeirResult<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| {
            let ident = part
                .as_ident()
                .ok_or_else(|| WeirError::unsupported(format!("unsupported name {name}")))?;
            Ok(normalize_ident(ident))
        })
        .collect::<WeirResult<_>>()?;
    match parts.as_slice() {
        [table] => Ok(table.clone()),
        [schema, table] if schema == SCHEMA => Ok(table.clone()),
        [db, schema, table] if db == DATABASE && schema == SCHEMA => Ok(table.clone()),
        [.., schema, _] => Err(WeirError::new(
            SqlState("3F000"),
            format!("schema \"{schema}\" does not exist"),
        )),
        [] => Err(WeirError::new(SqlState::SYNTAX_ERROR, "empty name")),
    }
}

/// An identifier as PostgreSQL resolves it: quoted ones keep their case.
pub fn normalize_ident(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_without_sqlstate_reads_as_55000() {
        let old: ViewFailure = serde_json::from_str(r#""division by zero""#).unwrap();
        assert_eq!(old, ViewFailure::other("division by zero"));
        let full = ViewFailure {
            message: "too big".into(),
            sqlstate: "53200".into(),
            hint: Some("raise it".into()),
        };
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(serde_json::from_str::<ViewFailure>(&text).unwrap(), full);
    }
}
