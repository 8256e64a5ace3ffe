//! Weir's own rows in `pg_catalog`, over datafusion-pg-catalog's tables:
//! what psql's `\d` and `\di` and drivers' reflection read about keys,
//! defaults and declared types.
//!
//! The crate builds `pg_class` and `pg_attribute` from DataFusion's
//! schemas, which know tables and views, Arrow types and nullability only,
//! and ships PostgreSQL's own rows for the other tables. This wraps its
//! `pg_catalog` schema and, from the pinned snapshot's catalog, corrects or
//! adds:
//!
//! - `pg_class`: `relkind = 'm'` for materialized views, `relhasindex` for
//!   tables with a primary key, `relam` heap for stored relations, and a
//!   row (`relkind = 'i'`, btree) for each primary key's index,
//!   `<table>_pkey` as PostgreSQL names it;
//! - `pg_index` and `pg_constraint`: a row for each primary key and
//!   `UNIQUE` constraint, and their
//!   vector columns (`indkey`, `conkey`) as arrays, which drivers `unnest`
//!   (`pg_index`'s written as `int2vector`/`oidvector`, `1 2` in text);
//! - `pg_attrdef`: a row for each column default, whose `adbin` is the
//!   default's SQL text (Weir's `pg_get_expr` returns it as it is);
//! - identifiers (`relname`, `attname`, `typname`, ...) are typed `name`;
//! - `pg_attribute`: a declared type's OID and typmod (`varchar(20)`,
//!   `numeric(10,2)`), `atthasdef`, and no `attnotnull` on the columns of
//!   views, which have no constraints in PostgreSQL.
//!
//! A primary key's index, its constraint and a default have OIDs made from
//! the table's Weir id ([`KeyOid`]), so `pg_get_indexdef` and
//! `pg_get_constraintdef` find the table from the OID alone.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int32Array, ListArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{collect, ExecutionPlan};

use crate::catalog::{Catalog, TableDef};
use crate::provider::PinnedSnapshot;
use weir_state::TableId;

/// The OIDs Weir gives a table's key objects: above every OID the
/// catalog crate hands out (it counts up from 16384).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOid {
    /// The primary key's index (`pg_index.indexrelid`).
    Index(TableId),
    /// The primary key's constraint (`pg_constraint.oid`).
    Constraint(TableId),
}

/// The OID of the `pg_catalog` namespace.
const PG_CATALOG_NAMESPACE: i32 = 11;

/// `pg_am` OIDs of the access methods psql names.
const HEAP_AM: i32 = 2;
const BTREE_AM: i32 = 403;

const INDEX_OID_BASE: i64 = 1 << 30;
const CONSTRAINT_OID_BASE: i64 = (1 << 30) + (1 << 28);
const ATTRDEF_OID_BASE: i64 = (1 << 30) + (1 << 29);
const IDS_PER_KIND: i64 = 1 << 28;
/// Above the defaults' OIDs (their last is below 2,030,000,000).
const SEQUENCE_OID_BASE: i64 = 2_050_000_000;

/// The `pg_class` OID of sequence `id`.
pub fn sequence_oid(id: TableId) -> i32 {
    (SEQUENCE_OID_BASE + id as i64 % (i32::MAX as i64 - SEQUENCE_OID_BASE)) as i32
}

/// The OID of the `public` namespace when no relation's row tells it
/// (datafusion-pg-catalog hands it the first OID).
const PUBLIC_NAMESPACE: i32 = 16384;

impl KeyOid {
    /// The OID.
    pub fn oid(self) -> i32 {
        let (base, id) = match self {
            KeyOid::Index(id) => (INDEX_OID_BASE, id),
            KeyOid::Constraint(id) => (CONSTRAINT_OID_BASE, id),
        };
        (base + (id as i64 % IDS_PER_KIND)) as i32
    }

    /// The key object with OID `oid`, if it is one.
    pub fn of(oid: i64) -> Option<KeyOid> {
        if (INDEX_OID_BASE..CONSTRAINT_OID_BASE).contains(&oid) {
            Some(KeyOid::Index((oid - INDEX_OID_BASE) as TableId))
        } else if (CONSTRAINT_OID_BASE..ATTRDEF_OID_BASE).contains(&oid) {
            Some(KeyOid::Constraint((oid - CONSTRAINT_OID_BASE) as TableId))
        } else {
            None
        }
    }
}

/// The name PostgreSQL gives a table's primary key (and its index).
pub fn key_name(table: &TableDef) -> String {
    format!("{}_pkey", table.name)
}

/// An index as `pg_catalog` shows it: a table's primary key's, or one
/// made with `CREATE INDEX` (on a table or a materialized view).
#[derive(Debug, Clone)]
pub struct CatalogIndex<'a> {
    /// The Weir id its OIDs derive from ([`KeyOid`]): the table's for a
    /// primary key, the index's own otherwise.
    pub id: TableId,
    /// Its name.
    pub name: String,
    /// The relation it indexes.
    pub relation: &'a str,
    /// Its columns, as indices into the relation's.
    pub columns: Vec<usize>,
    /// Its columns' names.
    pub column_names: Vec<&'a str>,
    /// A primary key's index (unique, with a constraint).
    pub primary: bool,
    /// A primary key's or `UNIQUE` constraint's index: unique, with a
    /// constraint of its own.
    pub unique: bool,
}

/// Every index of the catalog: primary keys' first, then the others.
pub fn catalog_indexes(catalog: &Catalog) -> Vec<CatalogIndex<'_>> {
    let primary = catalog
        .tables
        .values()
        .filter(|t| !t.primary_key.is_empty())
        .map(|table| CatalogIndex {
            id: table.id,
            name: key_name(table),
            relation: &table.name,
            columns: table.primary_key.clone(),
            column_names: table
                .primary_key
                .iter()
                .map(|&i| table.columns[i].name.as_str())
                .collect(),
            primary: true,
            unique: true,
        });
    let constraints = catalog.tables.values().flat_map(|table| {
        table.unique.iter().map(move |unique| CatalogIndex {
            id: unique.id,
            name: unique.name.clone(),
            relation: &table.name,
            columns: unique.columns.clone(),
            column_names: unique
                .columns
                .iter()
                .map(|&i| table.columns[i].name.as_str())
                .collect(),
            primary: false,
            unique: true,
        })
    });
    let created = catalog.indexes.values().filter_map(|index| {
        let columns = match catalog.tables.get(&index.relation) {
            Some(table) => &table.columns,
            None => &catalog.materialized_views.get(&index.relation)?.columns,
        };
        Some(CatalogIndex {
            id: index.id,
            name: index.name.clone(),
            relation: &index.relation,
            columns: index.columns.clone(),
            column_names: index
                .columns
                .iter()
                .map(|&i| columns[i].name.as_str())
                .collect(),
            primary: false,
            unique: false,
        })
    });
    primary.chain(constraints).chain(created).collect()
}

/// The index (or primary key constraint) with key OID `key`.
pub fn key_of(catalog: &Catalog, key: KeyOid) -> Option<CatalogIndex<'_>> {
    let (KeyOid::Index(id) | KeyOid::Constraint(id)) = key;
    catalog_indexes(catalog)
        .into_iter()
        .find(|i| i.id % IDS_PER_KIND as u64 == id)
        .filter(|i| i.unique || matches!(key, KeyOid::Index(_)))
}

/// What `pg_class` showed this session about relations' OIDs.
/// datafusion-pg-catalog hands OIDs out as a session reads the catalog and
/// keeps them for the session; functions of a relation's OID
/// (`pg_get_viewdef`, `pg_table_is_visible`) look it up here, as a client
/// finds the OID in `pg_class` first.
#[derive(Debug, Default)]
pub struct SessionOids {
    /// Weir's relations' names.
    pub names: HashMap<i32, String>,
    /// The relations in the search path: Weir's and `pg_catalog`'s (not
    /// `information_schema`'s).
    pub visible: std::collections::HashSet<i32>,
}

/// A session's [`SessionOids`], shared by its catalog and its functions.
pub type CatalogOids = Arc<parking_lot::RwLock<SessionOids>>;

/// datafusion-pg-catalog's `pg_catalog` with Weir's rows (see the module
/// documentation).
#[derive(Debug)]
pub struct PgCatalog {
    inner: Arc<dyn SchemaProvider>,
    pinned: Arc<PinnedSnapshot>,
    names: CatalogOids,
}

impl PgCatalog {
    /// Wraps `inner`; Weir's objects come from `pinned`, and the OIDs it
    /// shows are recorded in `names`.
    pub fn new(
        inner: Arc<dyn SchemaProvider>,
        pinned: Arc<PinnedSnapshot>,
        names: CatalogOids,
    ) -> Self {
        PgCatalog {
            inner,
            pinned,
            names,
        }
    }
}

/// The tables Weir adds rows to or corrects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Corrected {
    Class,
    Index,
    Constraint,
    Attrdef,
    Attribute,
    Sequence,
    /// Only its identifier columns typed `name`.
    Named,
}

impl Corrected {
    fn of(name: &str) -> Option<Corrected> {
        Some(match name {
            "pg_class" => Corrected::Class,
            "pg_index" => Corrected::Index,
            "pg_constraint" => Corrected::Constraint,
            "pg_attrdef" => Corrected::Attrdef,
            "pg_attribute" => Corrected::Attribute,
            "pg_sequence" => Corrected::Sequence,
            "pg_type" | "pg_namespace" | "pg_proc" | "pg_database" | "pg_roles" => Corrected::Named,
            _ => return None,
        })
    }
}

/// The catalog columns of PostgreSQL's `name` type (identifiers), which
/// the crate keeps as text; their fields carry arrow-pg's `pg.type`
/// metadata, so clients see `name` (OID 19).
const NAME_COLUMNS: &[&str] = &[
    "relname", "attname", "typname", "nspname", "conname", "proname", "datname", "rolname",
];

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        for view in crate::catalog_views::VIEWS {
            if !names.iter().any(|n| n == view) {
                names.push((*view).to_owned());
            }
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if crate::catalog_views::VIEWS.contains(&name) {
            return crate::catalog_views::table(name, &self.pinned.get().catalog);
        }
        let table = self.inner.table(name).await?;
        Ok(match (table, Corrected::of(name)) {
            (Some(inner), Some(kind)) => Some(Arc::new(WeirRows {
                kind,
                inner,
                schema: self.inner.clone(),
                pinned: self.pinned.clone(),
                names: self.names.clone(),
            })),
            (other, _) => other,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        crate::catalog_views::VIEWS.contains(&name) || self.inner.table_exist(name)
    }
}

/// A `pg_catalog` table with Weir's rows.
#[derive(Debug)]
struct WeirRows {
    kind: Corrected,
    inner: Arc<dyn TableProvider>,
    /// The crate's `pg_catalog`, to read relations' OIDs from `pg_class`.
    schema: Arc<dyn SchemaProvider>,
    pinned: Arc<PinnedSnapshot>,
    names: CatalogOids,
}

#[async_trait]
impl TableProvider for WeirRows {
    fn schema(&self) -> SchemaRef {
        vector_schema(self.kind, &self.inner.schema())
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = self.inner.schema();
        let rows = read(self.inner.as_ref(), state).await?;
        let catalog = &self.pinned.get().catalog;
        let batches = match self.kind {
            Corrected::Named => rows,
            Corrected::Sequence => vec![sequence_rows(&schema, catalog)?],
            Corrected::Class => {
                self.record(&rows, catalog)?;
                class_rows(&rows, catalog)?
            }
            kind => {
                let class = self
                    .schema
                    .table("pg_class")
                    .await?
                    .ok_or_else(|| DataFusionError::Internal("no pg_class".into()))?;
                let class = read(class.as_ref(), state).await?;
                let oids = self.record(&class, catalog)?;
                match kind {
                    Corrected::Index => {
                        let mut batches = rows;
                        batches.push(index_rows(&schema, catalog, &oids)?);
                        batches
                    }
                    Corrected::Constraint => {
                        let mut batches = rows;
                        batches.push(constraint_rows(&schema, catalog, &oids)?);
                        batches
                    }
                    Corrected::Attrdef => {
                        let mut batches = rows;
                        batches.push(attrdef_rows(&schema, catalog, &oids)?);
                        batches
                    }
                    Corrected::Attribute => attribute_rows(&rows, catalog, &oids)?,
                    Corrected::Class | Corrected::Named | Corrected::Sequence => {
                        unreachable!("handled above")
                    }
                }
            }
        };
        let listed = vector_schema(self.kind, &schema);
        let batches = batches
            .iter()
            .map(|batch| with_vectors(batch, &listed))
            .collect::<Result<Vec<_>>>()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            listed,
            projection.cloned(),
        )?)
    }
}

impl WeirRows {
    /// Records the OIDs `pg_class` shows (see [`SessionOids`]); returns
    /// Weir's relations' rows.
    fn record(
        &self,
        class: &[RecordBatch],
        catalog: &Catalog,
    ) -> Result<HashMap<String, Relation>> {
        let weir = relation_oids(class, catalog)?;
        let mut oids = self.names.write();
        oids.names = weir.iter().map(|(name, r)| (r.oid, name.clone())).collect();
        oids.visible = oids.names.keys().copied().collect();
        oids.visible.extend(
            catalog_indexes(catalog)
                .iter()
                .map(|index| KeyOid::Index(index.id).oid()),
        );
        for sequence in catalog.sequences.values() {
            let oid = sequence_oid(sequence.id);
            oids.visible.insert(oid);
            oids.names.insert(oid, sequence.name.clone());
        }
        for batch in class {
            let oid = cast(column(batch, "oid")?, &DataType::Int32)?;
            let namespace = cast(column(batch, "relnamespace")?, &DataType::Int32)?;
            let (oid, namespace) = (
                oid.as_primitive::<Int32Type>(),
                namespace.as_primitive::<Int32Type>(),
            );
            for row in 0..batch.num_rows() {
                if namespace.value(row) == PG_CATALOG_NAMESPACE {
                    oids.visible.insert(oid.value(row));
                }
            }
        }
        Ok(weir)
    }
}

/// The columns of `int2vector`, `oidvector` and `int2[]` types, which
/// datafusion-pg-catalog keeps as text (`1 2`, `[1]`), and their element
/// types: drivers `unnest` them.
fn vector_columns(kind: Corrected) -> &'static [(&'static str, DataType)] {
    match kind {
        Corrected::Index => &[
            ("indkey", DataType::Int16),
            ("indcollation", DataType::Int32),
            ("indclass", DataType::Int32),
            ("indoption", DataType::Int16),
        ],
        Corrected::Constraint => &[("conkey", DataType::Int16), ("confkey", DataType::Int16)],
        // Not in the crate's `pg_class`; always NULL (drivers read it).
        Corrected::Class => &[("reloptions", DataType::Utf8)],
        _ => &[],
    }
}

/// `schema` with [`vector_columns`] as lists and [`NAME_COLUMNS`] typed
/// `name`.
fn vector_schema(kind: Corrected, schema: &SchemaRef) -> SchemaRef {
    let vectors = vector_columns(kind);
    let list = |name: &str, element: &DataType| {
        let field = Field::new(name, DataType::new_list(element.clone(), true), true);
        // `pg_index`'s vectors are `int2vector` and `oidvector` on the wire
        // (`1 2` in text, which SQLAlchemy's reflection splits); the
        // others are arrays.
        let vector_type = match (kind, element) {
            (Corrected::Index, DataType::Int16) => "int2vector",
            (Corrected::Index, _) => "oidvector",
            _ => return field,
        };
        field.with_metadata(std::collections::HashMap::from([(
            arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
            vector_type.to_owned(),
        )]))
    };
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(
            |field| match vectors.iter().find(|(name, _)| name == field.name()) {
                Some((_, element)) => list(field.name(), element),
                None if NAME_COLUMNS.contains(&field.name().as_str()) => {
                    let mut metadata = field.metadata().clone();
                    metadata.insert(arrow_pg::datatypes::PG_TYPE_KEY.into(), "name".into());
                    field.as_ref().clone().with_metadata(metadata)
                }
                None => field.as_ref().clone(),
            },
        )
        .collect();
    for (name, element) in vectors {
        if schema.field_with_name(name).is_err() {
            fields.push(list(name, element));
        }
    }
    Arc::new(Schema::new(fields))
}

/// `batch` with its vector columns, text, read into `schema`'s lists.
fn with_vectors(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let Some(column) = batch.column_by_name(field.name()) else {
                return Ok(new_null_array(field.data_type(), batch.num_rows()));
            };
            match field.data_type() {
                DataType::List(element) if column.data_type() != field.data_type() => {
                    let text = cast(column, &DataType::Utf8)?;
                    let text = text.as_string::<i32>();
                    let lists = ListArray::from_iter_primitive::<Int32Type, _, _>(
                        (0..text.len())
                            .map(|row| text.is_valid(row).then(|| numbers(text.value(row)))),
                    );
                    Ok(cast(&lists, &DataType::List(element.clone()))?)
                }
                _ => Ok(column.clone()),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The numbers of a vector's text: `1 2`, `[1, 2]` or `{1,2}`.
fn numbers(text: &str) -> Vec<Option<i32>> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter(|n| !n.is_empty())
        .map(|n| n.parse().ok())
        .collect()
}

/// Every row of `table`.
pub(crate) async fn read(
    table: &dyn TableProvider,
    state: &dyn Session,
) -> Result<Vec<RecordBatch>> {
    let plan = table.scan(state, None, &[], None).await?;
    collect(plan, state.task_ctx()).await
}

/// One column of `batch` by name.
fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no column {name}")))
}

/// The text of row `row` of a string column.
fn text(array: &ArrayRef, row: usize) -> Result<Option<String>> {
    let text = cast(array, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    Ok(text.is_valid(row).then(|| text.value(row).to_owned()))
}

/// A relation's OID and its namespace's, as `pg_class` has them.
#[derive(Debug, Clone, Copy)]
struct Relation {
    oid: i32,
    namespace: i32,
}

/// The `pg_class` row of each of Weir's relations, by name. A name that
/// is also one of `pg_catalog`'s (OID 11's) is Weir's in the other row.
fn relation_oids(class: &[RecordBatch], catalog: &Catalog) -> Result<HashMap<String, Relation>> {
    let mut oids = HashMap::new();
    for batch in class {
        let oid = cast(column(batch, "oid")?, &DataType::Int32)?;
        let oid = oid.as_primitive::<Int32Type>();
        let namespace = cast(column(batch, "relnamespace")?, &DataType::Int32)?;
        let namespace = namespace.as_primitive::<Int32Type>();
        let names = cast(column(batch, "relname")?, &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        for row in 0..batch.num_rows() {
            let name = names.value(row);
            if namespace.value(row) != PG_CATALOG_NAMESPACE && catalog.kind_of(name).is_some() {
                let relation = Relation {
                    oid: oid.value(row),
                    namespace: namespace.value(row),
                };
                oids.insert(name.to_owned(), relation);
            }
        }
    }
    Ok(oids)
}

/// `pg_class`: materialized views' `relkind`, `relhasindex`, and a row
/// for each index.
fn class_rows(class: &[RecordBatch], catalog: &Catalog) -> Result<Vec<RecordBatch>> {
    let indexes = catalog_indexes(catalog);
    let indexes_of = |name: &str| -> Vec<&CatalogIndex> {
        indexes.iter().filter(|i| i.relation == name).collect()
    };
    let mut out = Vec::new();
    for batch in class {
        let schema = batch.schema();
        let names = cast(column(batch, "relname")?, &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let namespace = cast(column(batch, "relnamespace")?, &DataType::Int32)?;
        let namespace = namespace.as_primitive::<Int32Type>();
        let weir = |row: usize| namespace.value(row) != PG_CATALOG_NAMESPACE;
        let mut columns = batch.columns().to_vec();
        let relkind_at = schema.index_of("relkind")?;
        let relkind: Vec<Option<String>> = (0..batch.num_rows())
            .map(|row| {
                if weir(row) && catalog.materialized_views.contains_key(names.value(row)) {
                    Ok(Some("m".to_owned()))
                } else {
                    text(&columns[relkind_at], row)
                }
            })
            .collect::<Result<_>>()?;
        columns[relkind_at] = cast(
            &(Arc::new(datafusion::arrow::array::StringArray::from(relkind)) as ArrayRef),
            schema.field(relkind_at).data_type(),
        )?;
        let index_at = schema.index_of("relhasindex")?;
        let has_index: BooleanArray = (0..batch.num_rows())
            .map(|row| {
                let old = columns[index_at].as_boolean();
                Some((weir(row) && !indexes_of(names.value(row)).is_empty()) || old.value(row))
            })
            .collect();
        columns[index_at] = Arc::new(has_index);
        // Tables and materialized views are heap relations to psql.
        let am_at = schema.index_of("relam")?;
        let relam = cast(&columns[am_at], &DataType::Int32)?;
        let relam: Int32Array = (0..batch.num_rows())
            .map(|row| {
                let stored = weir(row)
                    && (catalog.tables.contains_key(names.value(row))
                        || catalog.materialized_views.contains_key(names.value(row)));
                let old = relam.as_primitive::<Int32Type>();
                Some(if stored { HEAP_AM } else { old.value(row) })
            })
            .collect();
        columns[am_at] = cast(
            &(Arc::new(relam) as ArrayRef),
            schema.field(am_at).data_type(),
        )?;
        out.push(RecordBatch::try_new(schema.clone(), columns)?);
        // Each index: its relation's row, renamed and retyped.
        for row in (0..batch.num_rows()).filter(|&row| weir(row)) {
            for index in indexes_of(names.value(row)) {
                let values = schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, field)| {
                        let value = match field.name().as_str() {
                            "oid" => ScalarValue::Int32(Some(KeyOid::Index(index.id).oid())),
                            "relname" => ScalarValue::Utf8(Some(index.name.clone())),
                            "relkind" => ScalarValue::Utf8(Some("i".into())),
                            "relam" => ScalarValue::Int32(Some(BTREE_AM)),
                            "relnatts" => ScalarValue::Int32(Some(index.columns.len() as i32)),
                            "relhasindex" => ScalarValue::Boolean(Some(false)),
                            "reltype" => ScalarValue::Int32(Some(0)),
                            _ => ScalarValue::try_from_array(batch.column(i), row)?,
                        };
                        value.cast_to(field.data_type())
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.push(row_batch(&schema, vec![values])?);
            }
        }
    }
    out.push(sequence_class_rows(class, catalog)?);
    Ok(out)
}

/// `pg_sequence`: each sequence's type, bounds, increment and start.
fn sequence_rows(schema: &SchemaRef, catalog: &Catalog) -> Result<RecordBatch> {
    let rows = catalog
        .sequences
        .values()
        .map(|sequence| {
            let options = &sequence.options;
            vec![
                (
                    "seqrelid",
                    ScalarValue::Int32(Some(sequence_oid(sequence.id))),
                ),
                (
                    "seqtypid",
                    ScalarValue::Int32(Some(options.type_oid as i32)),
                ),
                ("seqstart", ScalarValue::Int64(Some(options.start))),
                ("seqincrement", ScalarValue::Int64(Some(options.increment))),
                ("seqmax", ScalarValue::Int64(Some(options.max))),
                ("seqmin", ScalarValue::Int64(Some(options.min))),
                ("seqcache", ScalarValue::Int64(Some(1))),
                ("seqcycle", ScalarValue::Boolean(Some(options.cycle))),
            ]
        })
        .collect();
    named_rows(schema, rows)
}

/// A `pg_class` row (`relkind = 'S'`) for each sequence.
fn sequence_class_rows(class: &[RecordBatch], catalog: &Catalog) -> Result<RecordBatch> {
    let schema = class
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| DataFusionError::Internal("pg_class has no batch".into()))?;
    let namespace = relation_oids(class, catalog)?
        .values()
        .next()
        .map_or(PUBLIC_NAMESPACE, |r| r.namespace);
    let rows = catalog
        .sequences
        .values()
        .map(|sequence| {
            vec![
                ("oid", ScalarValue::Int32(Some(sequence_oid(sequence.id)))),
                ("relname", ScalarValue::Utf8(Some(sequence.name.clone()))),
                ("relnamespace", ScalarValue::Int32(Some(namespace))),
                ("relkind", ScalarValue::Utf8(Some("S".into()))),
                ("relpersistence", ScalarValue::Utf8(Some("p".into()))),
                ("relnatts", ScalarValue::Int32(Some(3))),
            ]
        })
        .collect();
    named_rows(&schema, rows)
}

/// A batch of `rows`, each a value per column of `schema`.
fn row_batch(schema: &SchemaRef, rows: Vec<Vec<ScalarValue>>) -> Result<RecordBatch> {
    let columns = (0..schema.fields().len())
        .map(|i| {
            let values = rows.iter().map(|row| row[i].clone());
            if rows.is_empty() {
                Ok(datafusion::arrow::array::new_empty_array(
                    schema.field(i).data_type(),
                ))
            } else {
                ScalarValue::iter_to_array(values)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Rows of `schema` from named values; a column not named is NULL, or its
/// type's zero where it may not be NULL.
fn named_rows(schema: &SchemaRef, rows: Vec<Vec<(&str, ScalarValue)>>) -> Result<RecordBatch> {
    let rows = rows
        .into_iter()
        .map(|named| {
            schema
                .fields()
                .iter()
                .map(
                    |field| match named.iter().find(|(name, _)| *name == field.name()) {
                        Some((_, value)) => value.cast_to(field.data_type()),
                        None if field.is_nullable() => ScalarValue::try_from(field.data_type()),
                        None => ScalarValue::new_default(field.data_type()),
                    },
                )
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    row_batch(schema, rows)
}

/// Every index whose relation `pg_class` showed, with the relation's OIDs.
fn shown_indexes<'a>(
    catalog: &'a Catalog,
    oids: &'a HashMap<String, Relation>,
) -> impl Iterator<Item = (CatalogIndex<'a>, Relation)> {
    catalog_indexes(catalog)
        .into_iter()
        .filter_map(|i| oids.get(i.relation).map(|oid| (i.clone(), *oid)))
}

/// An index's column numbers, 1-based, separated by `separator`.
fn column_numbers(index: &CatalogIndex, separator: &str) -> String {
    index
        .columns
        .iter()
        .map(|i| (i + 1).to_string())
        .collect::<Vec<_>>()
        .join(separator)
}

/// `pg_index`: a row for each index.
fn index_rows(
    schema: &SchemaRef,
    catalog: &Catalog,
    oids: &HashMap<String, Relation>,
) -> Result<RecordBatch> {
    let text = |s: String| ScalarValue::Utf8(Some(s));
    let yes = |b: bool| ScalarValue::Boolean(Some(b));
    let rows = shown_indexes(catalog, oids)
        .map(|(index, relation)| {
            let keys = index.columns.len();
            let zeros = vec!["0"; keys].join(" ");
            vec![
                (
                    "indexrelid",
                    ScalarValue::Int32(Some(KeyOid::Index(index.id).oid())),
                ),
                ("indrelid", ScalarValue::Int32(Some(relation.oid))),
                ("indnatts", ScalarValue::Int32(Some(keys as i32))),
                ("indnkeyatts", ScalarValue::Int32(Some(keys as i32))),
                ("indisunique", yes(index.unique)),
                ("indnullsnotdistinct", yes(false)),
                ("indisprimary", yes(index.primary)),
                ("indisexclusion", yes(false)),
                ("indimmediate", yes(true)),
                ("indisclustered", yes(false)),
                ("indisvalid", yes(true)),
                ("indcheckxmin", yes(false)),
                ("indisready", yes(true)),
                ("indislive", yes(true)),
                ("indisreplident", yes(false)),
                ("indkey", text(column_numbers(&index, " "))),
                ("indcollation", text(zeros.clone())),
                ("indclass", text(zeros.clone())),
                ("indoption", text(zeros)),
            ]
        })
        .collect();
    named_rows(schema, rows)
}

/// `pg_constraint`: a row for each primary key and `UNIQUE` constraint.
fn constraint_rows(
    schema: &SchemaRef,
    catalog: &Catalog,
    oids: &HashMap<String, Relation>,
) -> Result<RecordBatch> {
    let text = |s: &str| ScalarValue::Utf8(Some(s.to_owned()));
    let yes = |b: bool| ScalarValue::Boolean(Some(b));
    let rows = shown_indexes(catalog, oids)
        .filter(|(index, _)| index.unique)
        .map(|(index, relation)| {
            vec![
                (
                    "oid",
                    ScalarValue::Int32(Some(KeyOid::Constraint(index.id).oid())),
                ),
                ("conname", ScalarValue::Utf8(Some(index.name.clone()))),
                ("connamespace", ScalarValue::Int32(Some(relation.namespace))),
                ("contype", text(if index.primary { "p" } else { "u" })),
                ("condeferrable", yes(false)),
                ("condeferred", yes(false)),
                ("convalidated", yes(true)),
                ("conrelid", ScalarValue::Int32(Some(relation.oid))),
                ("contypid", ScalarValue::Int32(Some(0))),
                (
                    "conindid",
                    ScalarValue::Int32(Some(KeyOid::Index(index.id).oid())),
                ),
                ("conparentid", ScalarValue::Int32(Some(0))),
                ("confrelid", ScalarValue::Int32(Some(0))),
                ("confupdtype", text(" ")),
                ("confdeltype", text(" ")),
                ("confmatchtype", text(" ")),
                ("conislocal", yes(true)),
                ("coninhcount", ScalarValue::Int32(Some(0))),
                ("connoinherit", yes(true)),
                (
                    "conkey",
                    ScalarValue::Utf8(Some(format!("{{{}}}", column_numbers(&index, ",")))),
                ),
            ]
        })
        .collect();
    named_rows(schema, rows)
}

/// `pg_attrdef`: a row for each column default, `adbin` its SQL text.
fn attrdef_rows(
    schema: &SchemaRef,
    catalog: &Catalog,
    oids: &HashMap<String, Relation>,
) -> Result<RecordBatch> {
    let mut rows = Vec::new();
    for table in catalog.tables.values() {
        let Some(relation) = oids.get(&table.name) else {
            continue;
        };
        for (i, column) in table.columns.iter().enumerate() {
            // An identity column's sequence is not a default in PostgreSQL.
            if column.identity.is_some() {
                continue;
            }
            if let Some(default) = column.default.as_deref().map(|d| shown_default(column, d)) {
                let attrdef = ATTRDEF_OID_BASE + (table.id as i64 % (1 << 18)) * 1600 + i as i64;
                rows.push(vec![
                    ("oid", ScalarValue::Int32(Some(attrdef as i32))),
                    ("adrelid", ScalarValue::Int32(Some(relation.oid))),
                    ("adnum", ScalarValue::Int32(Some(i as i32 + 1))),
                    ("adbin", ScalarValue::Utf8(Some(default))),
                ]);
            }
        }
    }
    named_rows(schema, rows)
}

/// A default as PostgreSQL shows it: a string literal with a cast to its
/// column's type (`'none'::character varying`), a sequence's `nextval`
/// with its name as a `regclass` (`nextval('t_id_seq'::regclass)`),
/// anything else as written.
pub(crate) fn shown_default(column: &crate::catalog::ColumnDef, default: &str) -> String {
    if let Some(name) = default
        .strip_prefix("nextval('")
        .and_then(|rest| rest.strip_suffix("')"))
    {
        return format!("nextval('{name}'::regclass)");
    }
    let literal = default.len() >= 2
        && default.starts_with('\'')
        && default.ends_with('\'')
        && !default[1..default.len() - 1]
            .replace("''", "")
            .contains('\'');
    if !literal {
        return default.to_owned();
    }
    let type_name = match column.declared.map(|d| d.oid) {
        Some(1043) => "character varying".to_owned(),
        Some(1042) => "bpchar".to_owned(),
        Some(1700) => "numeric".to_owned(),
        _ => column.type_name(),
    };
    format!("{default}::{type_name}")
}

/// `pg_attribute` with declared types, defaults, and views' columns
/// nullable.
fn attribute_rows(
    attributes: &[RecordBatch],
    catalog: &Catalog,
    oids: &HashMap<String, Relation>,
) -> Result<Vec<RecordBatch>> {
    let by_oid: HashMap<i32, &str> = oids.iter().map(|(n, r)| (r.oid, n.as_str())).collect();
    attributes
        .iter()
        .map(|batch| {
            let schema = batch.schema();
            let relid = cast(column(batch, "attrelid")?, &DataType::Int32)?;
            let relid = relid.as_primitive::<Int32Type>();
            let attnum = cast(column(batch, "attnum")?, &DataType::Int32)?;
            let attnum = attnum.as_primitive::<Int32Type>();
            let mut columns = batch.columns().to_vec();
            let at = |name: &str| schema.index_of(name);
            let (type_at, typmod_at, default_at, not_null_at, identity_at) = (
                at("atttypid")?,
                at("atttypmod")?,
                at("atthasdef")?,
                at("attnotnull")?,
                at("attidentity")?,
            );
            let old_type = cast(&columns[type_at], &DataType::Int32)?;
            let old_typmod = cast(&columns[typmod_at], &DataType::Int32)?;
            let (mut types, mut typmods, mut defaults, mut not_nulls, mut identities) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for row in 0..batch.num_rows() {
                let name = by_oid.get(&relid.value(row));
                let table = name.and_then(|n| catalog.tables.get(*n));
                let column = name
                    .and_then(|n| catalog.columns_of(n))
                    .and_then(|c| c.get(attnum.value(row) as usize - 1));
                let declared = column.and_then(|c| c.declared);
                types.push(
                    declared.map_or(old_type.as_primitive::<Int32Type>().value(row), |d| {
                        d.oid as i32
                    }),
                );
                typmods.push(
                    declared.map_or(old_typmod.as_primitive::<Int32Type>().value(row), |d| {
                        d.typmod
                    }),
                );
                defaults.push(column.is_some_and(|c| c.default.is_some() && c.identity.is_none()));
                identities.push(column.and_then(|c| c.identity).map_or("", |i| i.code()));
                // A view's (or materialized view's) columns have no NOT NULL.
                let view = name.is_some() && table.is_none();
                not_nulls.push(!view && columns[not_null_at].as_boolean().value(row));
            }
            columns[type_at] = cast(
                &(Arc::new(Int32Array::from(types)) as ArrayRef),
                schema.field(type_at).data_type(),
            )?;
            columns[typmod_at] = cast(
                &(Arc::new(Int32Array::from(typmods)) as ArrayRef),
                schema.field(typmod_at).data_type(),
            )?;
            columns[default_at] = Arc::new(BooleanArray::from(defaults));
            columns[not_null_at] = Arc::new(BooleanArray::from(not_nulls));
            columns[identity_at] = cast(
                &(Arc::new(datafusion::arrow::array::StringArray::from(identities)) as ArrayRef),
                schema.field(identity_at).data_type(),
            )?;
            let batch = RecordBatch::try_new(schema, columns)?;
            let indexes = index_attributes(&batch, catalog, oids)?;
            Ok([batch, indexes])
        })
        .collect::<Result<Vec<_>>>()
        .map(|pairs| pairs.into_iter().flatten().collect())
}

/// `pg_attribute` rows of primary keys' indexes: each key column's row of
/// its table (in `attributes`), numbered in key order.
fn index_attributes(
    attributes: &RecordBatch,
    catalog: &Catalog,
    oids: &HashMap<String, Relation>,
) -> Result<RecordBatch> {
    let relid = cast(column(attributes, "attrelid")?, &DataType::Int32)?;
    let relid = relid.as_primitive::<Int32Type>();
    let attnum = cast(column(attributes, "attnum")?, &DataType::Int32)?;
    let attnum = attnum.as_primitive::<Int32Type>();
    let (mut rows, mut index_oids, mut numbers) = (Vec::new(), Vec::new(), Vec::new());
    for (index, relation) in shown_indexes(catalog, oids) {
        for (position, key) in index.columns.iter().enumerate() {
            let row = (0..attributes.num_rows()).find(|&row| {
                relid.value(row) == relation.oid && attnum.value(row) == *key as i32 + 1
            });
            if let Some(row) = row {
                rows.push(row as u32);
                index_oids.push(KeyOid::Index(index.id).oid());
                numbers.push(position as i32 + 1);
            }
        }
    }
    let schema = attributes.schema();
    let taken = datafusion::arrow::compute::take_record_batch(
        attributes,
        &datafusion::arrow::array::UInt32Array::from(rows),
    )?;
    let mut columns = taken.columns().to_vec();
    let replace = |columns: &mut Vec<ArrayRef>, name: &str, values: Vec<i32>| -> Result<()> {
        let at = schema.index_of(name)?;
        columns[at] = cast(
            &(Arc::new(Int32Array::from(values)) as ArrayRef),
            schema.field(at).data_type(),
        )?;
        Ok(())
    };
    let count = numbers.len();
    replace(&mut columns, "attrelid", index_oids)?;
    replace(&mut columns, "attnum", numbers)?;
    let no_default = schema.index_of("atthasdef")?;
    columns[no_default] = Arc::new(BooleanArray::from(vec![false; count]));
    Ok(RecordBatch::try_new(schema, columns)?)
}
