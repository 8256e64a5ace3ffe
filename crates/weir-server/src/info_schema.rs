//! `information_schema` with PostgreSQL's type names. DataFusion's
//! `information_schema.columns` names types as Arrow does (`Int32`,
//! `Utf8`, `Decimal128(12, 3)`) and types its counts `UInt64`; ORMs and
//! tools read `data_type` as PostgreSQL writes it (`integer`, `text`,
//! `numeric`) and the counts as integers. This wraps DataFusion's provider
//! and rewrites `columns`. In every view the text columns have the types
//! PostgreSQL's domains give them on the wire: identifiers
//! (`sql_identifier`: `table_name`, `column_name`, ...) are `name`, other
//! text (`character_data`, `yes_or_no`) `varchar`.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
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

/// `information_schema` as PostgreSQL shows it (see the module doc).
#[derive(Debug)]
pub struct InformationSchema {
    inner: InformationSchemaProvider,
}

impl InformationSchema {
    /// The schema over every catalog of `catalogs`.
    pub fn new(catalogs: Arc<dyn CatalogProviderList>) -> Self {
        InformationSchema {
            inner: InformationSchemaProvider::new(catalogs),
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
            let columns = name.eq_ignore_ascii_case("columns");
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
    /// Whether this is `columns`, whose `data_type` is rewritten.
    type_names: bool,
}

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
    fn new(inner: Arc<dyn TableProvider>, type_names: bool) -> Self {
        let fields: Vec<Field> = inner
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
        InfoSchemaTable {
            inner,
            schema: Arc::new(Schema::new(fields)),
            type_names,
        }
    }

    /// One batch of DataFusion's rows, as PostgreSQL shows them.
    fn rewrite(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(column, field)| {
                if self.type_names && field.name() == "data_type" {
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
