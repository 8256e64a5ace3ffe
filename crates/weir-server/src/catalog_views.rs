//! `pg_views`, `pg_matviews` and `pg_indexes` with Weir's objects: the
//! views' definitions and every index (primary keys' included), as the
//! tools that browse a database (DBeaver, pgAdmin, Metabase) and scripts
//! read them. datafusion-pg-catalog ships the first two empty and has no
//! `pg_indexes`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::Result;

use crate::catalog::Catalog;
use crate::catalog_functions::{index_definition, view_definition};
use crate::catalog_rows::catalog_indexes;

/// The catalog views this module fills.
pub const VIEWS: &[&str] = &["pg_views", "pg_matviews", "pg_indexes"];

/// Table `name` (one of [`VIEWS`]) with `catalog`'s objects.
pub fn table(name: &str, catalog: &Catalog) -> Result<Option<Arc<dyn TableProvider>>> {
    let (schema, columns) = match name {
        "pg_views" => views(catalog),
        "pg_matviews" => matviews(catalog),
        "pg_indexes" => indexes(catalog),
        _ => return Ok(None),
    };
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Some(Arc::new(MemTable::try_new(
        schema,
        vec![vec![batch]],
    )?)))
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn strings<'a>(values: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// A column of `rows` copies of `value`.
fn repeated(value: &str, rows: usize) -> ArrayRef {
    strings(std::iter::repeat_n(value, rows))
}

fn views(catalog: &Catalog) -> (SchemaRef, Vec<ArrayRef>) {
    let names: Vec<&str> = catalog.views.keys().map(String::as_str).collect();
    let definitions: Vec<String> = names
        .iter()
        .map(|name| view_definition(catalog, name).unwrap_or_default())
        .collect();
    let schema = Schema::new(vec![
        text("schemaname"),
        text("viewname"),
        text("viewowner"),
        text("definition"),
    ]);
    let columns = vec![
        repeated("public", names.len()),
        strings(names.iter().copied()),
        repeated("postgres", names.len()),
        strings(definitions.iter().map(String::as_str)),
    ];
    (Arc::new(schema), columns)
}

fn matviews(catalog: &Catalog) -> (SchemaRef, Vec<ArrayRef>) {
    let views: Vec<_> = catalog
        .materialized_views
        .values()
        .filter(|v| v.sink.is_none())
        .collect();
    let definitions: Vec<String> = views
        .iter()
        .map(|v| view_definition(catalog, &v.name).unwrap_or_default())
        .collect();
    let indexed: BooleanArray = views
        .iter()
        .map(|v| Some(catalog.indexes.values().any(|i| i.relation == v.name)))
        .collect();
    let schema = Schema::new(vec![
        text("schemaname"),
        text("matviewname"),
        text("matviewowner"),
        text("tablespace"),
        Field::new("hasindexes", DataType::Boolean, true),
        Field::new("ispopulated", DataType::Boolean, true),
        text("definition"),
    ]);
    let columns = vec![
        repeated("public", views.len()),
        strings(views.iter().map(|v| v.name.as_str())),
        repeated("postgres", views.len()),
        Arc::new(StringArray::new_null(views.len())) as ArrayRef,
        Arc::new(indexed),
        Arc::new(BooleanArray::from(vec![true; views.len()])),
        strings(definitions.iter().map(String::as_str)),
    ];
    (Arc::new(schema), columns)
}

fn indexes(catalog: &Catalog) -> (SchemaRef, Vec<ArrayRef>) {
    let indexes = catalog_indexes(catalog);
    let schema = Schema::new(vec![
        text("schemaname"),
        text("tablename"),
        text("indexname"),
        text("tablespace"),
        text("indexdef"),
    ]);
    let definitions: Vec<String> = indexes.iter().map(index_definition).collect();
    let columns = vec![
        repeated("public", indexes.len()),
        strings(indexes.iter().map(|i| i.relation)),
        strings(indexes.iter().map(|i| i.name.as_str())),
        Arc::new(StringArray::new_null(indexes.len())) as ArrayRef,
        strings(definitions.iter().map(String::as_str)),
    ];
    (Arc::new(schema), columns)
}
