//! `information_schema` with PostgreSQL's type names. DataFusion's
//! `information_schema.columns` names types as Arrow does (`Int32`,
//! `Utf8`, `Decimal128(12, 3)`), types its counts `UInt64` and numbers
//! columns from 0; ORMs and tools read `data_type` as PostgreSQL writes
//! it (`integer`, `character varying`, `numeric`), the counts as integers
//! and positions from 1. This wraps DataFusion's provider and rewrites
//! `columns`, with what Weir's catalog says of its relations' columns
//! (declared types, lengths, defaults, identity) and PostgreSQL's
//! `udt_name`, `is_identity` and `identity_generation` columns added. In
//! every view the text columns have the types PostgreSQL's domains give
//! them on the wire: identifiers (`sql_identifier`: `table_name`,
//! `column_name`, ...) are `name`, other text (`character_data`,
//! `yes_or_no`) `varchar`.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::{Catalog, ColumnDef};
use crate::provider::PinnedSnapshot;

/// `information_schema` as PostgreSQL shows it (see the module doc).
#[derive(Debug)]
pub struct InformationSchema {
    inner: InformationSchemaProvider,
    pinned: Arc<PinnedSnapshot>,
}

impl InformationSchema {
    /// The schema over every catalog of `catalogs`; Weir's relations'
    /// columns as `pinned`'s catalog declares them.
    pub fn new(catalogs: Arc<dyn CatalogProviderList>, pinned: Arc<PinnedSnapshot>) -> Self {
        InformationSchema {
            inner: InformationSchemaProvider::new(catalogs),
            pinned,
        }
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        Ok(table.map(|inner| {
            let columns = name
                .eq_ignore_ascii_case("columns")
                .then(|| self.pinned.clone());
            Arc::new(InfoSchemaTable::new(inner, columns)) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// An `information_schema` view with PostgreSQL's wire types: integer
/// counts, `name` identifiers and `varchar` text; for `columns`, also
/// PostgreSQL's type names.
#[derive(Debug)]
struct InfoSchemaTable {
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    /// For `columns`, which is rewritten: the catalog its columns are
    /// described from.
    columns_of: Option<Arc<PinnedSnapshot>>,
}

/// The columns PostgreSQL's `information_schema.columns` has beyond
/// DataFusion's, added at its end.
const ADDED_COLUMNS: [&str; 3] = ["udt_name", "is_identity", "identity_generation"];

/// The PostgreSQL type an `information_schema` text column is sent as:
/// its domain's (`sql_identifier` for names, `character_data` or
/// `yes_or_no` for the rest).
fn text_type(column: &str) -> &'static str {
    let identifier = ["_catalog", "_schema", "_name"]
        .iter()
        .any(|suffix| column.ends_with(suffix));
    if identifier {
        "name"
    } else {
        "varchar"
    }
}

impl InfoSchemaTable {
    fn new(inner: Arc<dyn TableProvider>, columns_of: Option<Arc<PinnedSnapshot>>) -> Self {
        let mut fields: Vec<Field> = inner
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::UInt64 => f.as_ref().clone().with_data_type(DataType::Int32),
                DataType::Utf8 => {
                    let mut metadata = f.metadata().clone();
                    metadata.insert(
                        arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
                        text_type(f.name()).to_owned(),
                    );
                    f.as_ref().clone().with_metadata(metadata)
                }
                _ => f.as_ref().clone(),
            })
            .collect();
        if columns_of.is_some() {
            for name in ADDED_COLUMNS {
                let kind = if name == "udt_name" {
                    "name"
                } else {
                    "varchar"
                };
                let metadata = [(arrow_pg::datatypes::PG_TYPE_KEY.to_owned(), kind.to_owned())];
                fields.push(Field::new(name, DataType::Utf8, true).with_metadata(metadata.into()));
            }
        }
        InfoSchemaTable {
            inner,
            schema: Arc::new(Schema::new(fields)),
            columns_of,
        }
    }

    /// One batch of DataFusion's rows, as PostgreSQL shows them.
    fn rewrite(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mut columns = batch
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(column, field)| {
                if self.columns_of.is_some() && field.name() == "data_type" {
                    let names: StringArray = column
                        .as_string::<i32>()
                        .iter()
                        .map(|t| t.map(postgres_data_type))
                        .collect();
                    Ok(Arc::new(names) as ArrayRef)
                } else {
                    Ok(cast(column, field.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some(pinned) = &self.columns_of {
            describe_columns(&pinned.get().catalog, batch, &self.schema, &mut columns)?;
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// `information_schema.columns.data_type` for an Arrow type written as
/// Arrow writes it: PostgreSQL's name, without a typmod, `ARRAY` for
/// arrays.
fn postgres_data_type(arrow: &str) -> String {
    match DataType::from_str(arrow) {
        Ok(DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)) => {
            "ARRAY".into()
        }
        Ok(data_type) => {
            let name = crate::types::pg_type_name(&data_type);
            match name.split_once('(') {
                Some((base, _)) => base.to_owned(),
                None => name,
            }
        }
        Err(_) => arrow.to_owned(),
    }
}

/// `columns`' rows (their arrays in `columns`, typed as in `schema`, the
/// added ones last) as PostgreSQL describes them: positions from 1, and
/// for the columns of Weir's relations what the catalog declares.
fn describe_columns(
    catalog: &Catalog,
    batch: &RecordBatch,
    schema: &SchemaRef,
    columns: &mut Vec<ArrayRef>,
) -> Result<()> {
    let text = |name: &str| -> Result<StringArray> {
        let at = batch.schema().index_of(name)?;
        Ok(cast(batch.column(at), &DataType::Utf8)?
            .as_string::<i32>()
            .clone())
    };
    let (schemas, tables, names, types) = (
        text("table_schema")?,
        text("table_name")?,
        text("column_name")?,
        text("data_type")?,
    );
    let at = |name: &str| schema.index_of(name);
    let int = |i: usize| -> Result<Int32Array> {
        Ok(cast(&columns[i], &DataType::Int32)?.as_primitive().clone())
    };
    let (position_at, default_at, type_at, length_at, octets_at, scale_at, precision_at) = (
        at("ordinal_position")?,
        at("column_default")?,
        at("data_type")?,
        at("character_maximum_length")?,
        at("character_octet_length")?,
        at("numeric_scale")?,
        at("numeric_precision")?,
    );
    let positions: Int32Array = int(position_at)?.iter().map(|p| p.map(|p| p + 1)).collect();
    let (old_lengths, old_scales, old_precisions) =
        (int(length_at)?, int(scale_at)?, int(precision_at)?);
    let old_types = columns[type_at].as_string::<i32>().clone();
    let (mut defaults, mut data_types, mut lengths, mut octets, mut scales) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut precisions = Vec::new();
    let (mut udt_names, mut identities, mut generations) = (Vec::new(), Vec::new(), Vec::new());
    for row in 0..batch.num_rows() {
        let declared = (schemas.value(row) == crate::catalog::SCHEMA)
            .then(|| catalog.columns_of(tables.value(row)))
            .flatten()
            .and_then(|c| c.iter().find(|c| c.name == names.value(row)));
        let arrow_type = DataType::from_str(types.value(row)).ok();
        let text_type = matches!(arrow_type, Some(DataType::Utf8 | DataType::LargeUtf8));
        let integer = matches!(
            arrow_type,
            Some(DataType::Int16 | DataType::Int32 | DataType::Int64)
        );
        let column_data_type = declared.map(|c| match c.declared.map(|d| d.oid) {
            Some(1042) => "character".to_owned(),
            // Without the typmod: `numeric`, not `numeric(10,2)`.
            _ => match c.type_name().split_once('(') {
                Some((base, _)) => base.to_owned(),
                None => c.type_name(),
            },
        });
        data_types.push(column_data_type.or_else(|| {
            old_types
                .is_valid(row)
                .then(|| old_types.value(row).to_owned())
        }));
        let max_chars = declared.and_then(|c| c.max_chars);
        lengths.push(
            max_chars
                .map(|n| n as i32)
                .or_else(|| old_lengths.is_valid(row).then(|| old_lengths.value(row))),
        );
        // PostgreSQL: four bytes a character, 1 GiB for text.
        octets.push(
            match (
                max_chars,
                text_type && declared.is_none_or(|c| c.json.is_none() && !c.is_uuid()),
            ) {
                (Some(n), _) => Some((n as i32).saturating_mul(4)),
                (None, true) => Some(1 << 30),
                (None, false) => None,
            },
        );
        // An unconstrained `numeric` has neither.
        let unconstrained = declared
            .and_then(|c| c.declared)
            .is_some_and(|d| d.oid == 1700 && d.typmod == -1);
        // Binary digits, as PostgreSQL counts them (a float's mantissa).
        precisions.push(match arrow_type {
            _ if unconstrained => None,
            Some(DataType::Float64) => Some(53),
            Some(DataType::Float32) => Some(24),
            Some(DataType::Int16) => Some(16),
            Some(DataType::Int32) => Some(32),
            Some(DataType::Int64) => Some(64),
            _ => old_precisions
                .is_valid(row)
                .then(|| old_precisions.value(row)),
        });
        scales.push(if integer {
            Some(0)
        } else if unconstrained {
            None
        } else {
            old_scales.is_valid(row).then(|| old_scales.value(row))
        });
        let identity = declared.and_then(|c| c.identity);
        defaults.push(declared.and_then(|c| {
            let default = c.default.as_deref()?;
            identity
                .is_none()
                .then(|| crate::catalog_rows::shown_default(c, default))
        }));
        identities.push(Some(if identity.is_some() { "YES" } else { "NO" }));
        generations.push(identity.map(|i| match i {
            crate::sequences::ddl::Identity::Always => "ALWAYS",
            crate::sequences::ddl::Identity::ByDefault => "BY DEFAULT",
        }));
        udt_names.push(match declared {
            Some(c) => Some(udt_name(c)),
            None => arrow_type
                .and_then(|t| arrow_pg::datatypes::into_pg_type(&t).ok())
                .map(|t| t.name().to_owned()),
        });
    }
    let typed = |array: ArrayRef, i: usize| cast(&array, schema.field(i).data_type());
    columns[position_at] = typed(Arc::new(positions), position_at)?;
    columns[default_at] = typed(Arc::new(StringArray::from(defaults)), default_at)?;
    columns[type_at] = Arc::new(StringArray::from(data_types));
    columns[length_at] = typed(Arc::new(Int32Array::from(lengths)), length_at)?;
    columns[octets_at] = typed(Arc::new(Int32Array::from(octets)), octets_at)?;
    columns[scale_at] = typed(Arc::new(Int32Array::from(scales)), scale_at)?;
    columns[precision_at] = typed(Arc::new(Int32Array::from(precisions)), precision_at)?;
    columns.push(Arc::new(StringArray::from(udt_names)));
    columns.push(Arc::new(StringArray::from(identities)));
    columns.push(Arc::new(StringArray::from(generations)));
    Ok(())
}

/// `pg_type.typname` of a declared column (`int4`, `varchar`, `uuid`).
fn udt_name(column: &ColumnDef) -> String {
    match (column.json, column.declared.map(|d| d.oid)) {
        (Some(crate::json::JsonKind::Json), _) => "json".into(),
        (Some(crate::json::JsonKind::Jsonb), _) => "jsonb".into(),
        (None, Some(crate::varchar::OID)) => "varchar".into(),
        (None, Some(crate::uuid_type::OID)) => "uuid".into(),
        (None, Some(1042)) => "bpchar".into(),
        (None, Some(1700)) => "numeric".into(),
        _ => arrow_pg::datatypes::into_pg_type(&column.data_type)
            .map(|t| t.name().to_owned())
            .unwrap_or_else(|_| column.type_name()),
    }
}

#[async_trait]
impl TableProvider for InfoSchemaTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
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
        let batches = crate::catalog_rows::read(self.inner.as_ref(), state).await?;
        let rewritten = batches
            .iter()
            .map(|b| self.rewrite(b))
            .collect::<Result<Vec<_>>>()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[rewritten],
            self.schema.clone(),
            projection.cloned(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_type_names_become_postgresql_names() {
        for (arrow, postgres) in [
            ("Int32", "integer"),
            ("Int64", "bigint"),
            ("Utf8", "text"),
            ("Decimal128(12, 3)", "numeric"),
            (
                "Timestamp(Microsecond, None)",
                "timestamp without time zone",
            ),
            ("Float64", "double precision"),
            ("Boolean", "boolean"),
        ] {
            assert_eq!(postgres_data_type(arrow), postgres, "{arrow}");
        }
    }
}
