//! `pg_class.relkind = 'm'` for materialized views, so psql's `\dm` lists
//! them and `\d` calls them materialized views.
//!
//! datafusion-pg-catalog derives `relkind` from DataFusion's table types,
//! which know tables and views only. This wraps its `pg_catalog` schema and
//! rewrites `relkind` of `pg_class` rows whose name is a materialized view
//! of the pinned snapshot.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::{case, col, in_list, lit};
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::provider::PinnedSnapshot;

/// datafusion-pg-catalog's `pg_catalog` with `pg_class` wrapped.
#[derive(Debug)]
pub struct PgCatalog {
    inner: Arc<dyn SchemaProvider>,
    pinned: Arc<PinnedSnapshot>,
}

impl PgCatalog {
    /// Wraps `inner`; materialized views come from `pinned`.
    pub fn new(inner: Arc<dyn SchemaProvider>, pinned: Arc<PinnedSnapshot>) -> Self {
        PgCatalog { inner, pinned }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        Ok(match table {
            Some(inner) if name == "pg_class" => Some(Arc::new(PgClass {
                inner,
                pinned: self.pinned.clone(),
            })),
            other => other,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// `pg_class` with `relkind` corrected for materialized views.
#[derive(Debug)]
struct PgClass {
    inner: Arc<dyn TableProvider>,
    pinned: Arc<PinnedSnapshot>,
}

#[async_trait]
impl TableProvider for PgClass {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
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
        let plan = self.inner.scan(state, None, &[], None).await?;
        let schema = plan.schema();
        let views: Vec<PhysicalExprRef> = self
            .pinned
            .get()
            .catalog
            .materialized_views
            .keys()
            .map(|name| lit(name.clone()))
            .collect();
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let mut exprs: Vec<(PhysicalExprRef, String)> = Vec::new();
        for &i in projection.unwrap_or(&all) {
            let name = schema.field(i).name().clone();
            let column = col(&name, &schema)?;
            let expr = if name == "relkind" && !views.is_empty() {
                let is_view = in_list(col("relname", &schema)?, views.clone(), &false, &schema)?;
                case(None, vec![(is_view, lit("m"))], Some(column))?
            } else {
                column
            };
            exprs.push((expr, name));
        }
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }
}
