//! Catalog functions that psql and ORMs call while describing a table and
//! that datafusion-pg-catalog does not provide (or answers with empty
//! text), answered from Weir's model:
//!
//! - `pg_get_indexdef` and `pg_get_constraintdef` of a primary key's index
//!   and constraint (`catalog_rows.rs` gives them OIDs that name their
//!   table);
//! - `pg_get_expr` of a column default: Weir's `pg_attrdef.adbin` holds the
//!   default's SQL text, returned as it is;
//! - `pg_get_serial_sequence` is NULL (Weir has no sequences) and every
//!   collation is visible (Weir has one).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::catalog::Catalog;
use crate::catalog_rows::{key_of, CatalogIndex, CatalogOids, KeyOid};
use crate::functions::rows_of;
use crate::provider::PinnedSnapshot;

/// Registers the functions in `ctx`; keys and views are looked up in
/// `pinned`, relations' OIDs in `names`.
pub fn register(ctx: &SessionContext, pinned: &Arc<PinnedSnapshot>, names: &CatalogOids) {
    // Weir has one collation, and its functions are all visible.
    ctx.register_udf(always("pg_collation_is_visible", true));
    ctx.register_udf(pg_get_expr());
    ctx.register_udf(pg_size_pretty());
    ctx.register_udf(name_constant("current_database", crate::catalog::DATABASE));
    ctx.register_udf(name_constant("current_schema", crate::catalog::SCHEMA));
    // Weir has no comments on objects (`COMMENT ON`), and no user-defined
    // functions for `\df` to describe.
    for name in [
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
    ] {
        ctx.register_udf(key_function(name, |_, _| None));
    }
    let visible = names.clone();
    ctx.register_udf(visibility("pg_table_is_visible", move |oid| {
        visible.read().visible.contains(&oid)
    }));
    let (viewdef, names) = (pinned.clone(), names.clone());
    ctx.register_udf(key_function("pg_get_viewdef", move |oid, _| {
        let catalog = &viewdef.get().catalog;
        let name = names.read().names.get(&(oid as i32))?.clone();
        view_definition(catalog, &name)
    }));
    ctx.register_udf(always("pg_function_is_visible", true));
    for size in ["pg_table_size", "pg_indexes_size"] {
        ctx.register_udf(zero_size(size));
    }
    let indexdef = pinned.clone();
    ctx.register_udf(key_function("pg_get_indexdef", move |oid, column| {
        indexdef_of(&indexdef.get().catalog, oid, column)
    }));
    let constraintdef = pinned.clone();
    ctx.register_udf(key_function("pg_get_constraintdef", move |oid, _| {
        let catalog = &constraintdef.get().catalog;
        let index = key_of(catalog, KeyOid::of(oid)?)?;
        Some(format!(
            "{} ({})",
            if index.primary {
                "PRIMARY KEY"
            } else {
                "UNIQUE"
            },
            quoted_list(&index.column_names)
        ))
    }));
}

/// A view's (or materialized view's) query, as its definition was
/// written.
/// A view's or materialized view's definition as `pg_get_viewdef` gives
/// it.
pub(crate) fn view_definition(catalog: &Catalog, name: &str) -> Option<String> {
    let query = match catalog.views.get(name) {
        Some(view) => &view.query,
        None => &catalog.materialized_views.get(name)?.query,
    };
    Some(format!(" {};", query.trim_end_matches(';')))
}

/// `pg_get_indexdef(oid [, column, pretty])`: the `CREATE INDEX` of an
/// index, or with a column number above 0 that column.
fn indexdef_of(catalog: &Catalog, oid: i64, column: Option<i64>) -> Option<String> {
    let index = key_of(catalog, KeyOid::of(oid)?)?;
    match column.filter(|c| *c > 0) {
        Some(n) => index.column_names.get(n as usize - 1).map(|c| quoted(c)),
        None => Some(index_definition(&index)),
    }
}

/// The `CREATE INDEX` statement of `index`, as `pg_get_indexdef` and
/// `pg_indexes.indexdef` give it.
pub(crate) fn index_definition(index: &CatalogIndex<'_>) -> String {
    format!(
        "CREATE {}INDEX {} ON public.{} USING btree ({})",
        if index.unique { "UNIQUE " } else { "" },
        quoted(&index.name),
        quoted(index.relation),
        quoted_list(&index.column_names)
    )
}

/// A function of an OID (and an optional number, then an ignored `pretty`
/// flag) giving text or NULL.
fn key_function(
    name: &str,
    text_of: impl Fn(i64, Option<i64>) -> Option<String> + Send + Sync + 'static,
) -> ScalarUDF {
    let function = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let numbers = |i: usize| -> Result<Option<ArrayRef>> {
            args.get(i)
                .map(|a| Ok(cast(&a.to_array(rows)?, &DataType::Int64)?))
                .transpose()
        };
        let (oids, columns) = (numbers(0)?, numbers(1)?);
        let oids = oids.expect("the signature asks for an OID");
        let oids = oids.as_primitive::<Int64Type>();
        let columns = columns.as_ref().map(|c| c.as_primitive::<Int64Type>());
        let text: StringArray = (0..rows)
            .map(|row| {
                let column = columns.and_then(|c| c.is_valid(row).then(|| c.value(row)));
                oids.is_valid(row)
                    .then(|| text_of(oids.value(row), column))
                    .flatten()
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(text)))
    };
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        name,
        Signature::variadic_any(Volatility::Stable),
        DataType::Utf8,
        Arc::new(function),
    ))
}

/// `pg_get_expr(expr, relation [, pretty])`: Weir's stored expressions are
/// SQL text already.
fn pg_get_expr() -> ScalarUDF {
    let function = |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        Ok(ColumnarValue::Array(cast(
            &args[0].to_array(rows)?,
            &DataType::Utf8,
        )?))
    };
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_get_expr",
        Signature::variadic_any(Volatility::Stable),
        DataType::Utf8,
        Arc::new(function),
    ))
}

/// A function of an OID that is `value` for every object.
fn always(name: &str, value: bool) -> ScalarUDF {
    visibility(name, move |_| value)
}

/// A function of an OID that is whether `visible` holds for it.
fn visibility(name: &str, visible: impl Fn(i32) -> bool + Send + Sync + 'static) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int32],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let rows = rows_of(args);
            let oids = cast(&args[0].to_array(rows)?, &DataType::Int32)?;
            let oids = oids.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
            let shown: BooleanArray = oids.iter().map(|oid| oid.map(&visible)).collect();
            Ok(ColumnarValue::Array(Arc::new(shown)))
        }),
    )
}

/// A size function of an OID (`pg_table_size`): 0, as
/// datafusion-pg-catalog's `pg_relation_size` answers; Weir's state sizes
/// are in `weir_state_tables`.
fn zero_size(name: &str) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int32],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(|args: &[ColumnarValue]| {
            let rows = rows_of(args);
            Ok(ColumnarValue::Array(Arc::new(
                datafusion::arrow::array::Int64Array::from(vec![0; rows]),
            )))
        }),
    )
}

/// A function of no arguments whose value is the identifier `value`, of
/// PostgreSQL's `name` type (`current_database()`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NameConstant {
    function: &'static str,
    value: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for NameConstant {
    fn name(&self) -> &str {
        self.function
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        let metadata = std::collections::HashMap::from([(
            arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
            "name".to_owned(),
        )]);
        Ok(Arc::new(
            Field::new(self.function, DataType::Utf8, false).with_metadata(metadata),
        ))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            self.value.to_owned(),
        ))))
    }
}

fn name_constant(function: &'static str, value: &'static str) -> ScalarUDF {
    ScalarUDF::new_from_impl(NameConstant {
        function,
        value,
        signature: Signature::nullary(Volatility::Stable),
    })
}

/// `pg_size_pretty(bytes)`: a size in bytes, kB, MB, GB or TB, as
/// PostgreSQL writes it (a unit is used from 10 of it on, rounded half
/// up).
fn pg_size_pretty() -> ScalarUDF {
    let function = |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let rows = rows_of(args);
        let sizes = cast(&args[0].to_array(rows)?, &DataType::Int64)?;
        let text: StringArray = sizes
            .as_primitive::<Int64Type>()
            .iter()
            .map(|size| size.map(size_pretty))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(text)))
    };
    ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "pg_size_pretty",
        Signature::variadic_any(Volatility::Immutable),
        DataType::Utf8,
        Arc::new(function),
    ))
}

/// PostgreSQL's `pg_size_pretty` of a `bigint`.
fn size_pretty(bytes: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    if bytes.abs() < LIMIT {
        return format!("{bytes} bytes");
    }
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    // One extra bit is kept for rounding.
    let mut size = bytes >> 9;
    for unit in ["kB", "MB", "GB"] {
        if size.abs() < LIMIT * 2 - 1 {
            return format!("{} {unit}", half_rounded(size));
        }
        size >>= 10;
    }
    format!("{} TB", half_rounded(size))
}

/// An identifier as PostgreSQL's `quote_ident` writes it.
pub(crate) fn quoted(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Identifiers, quoted, separated by `, `.
fn quoted_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| quoted(n))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_as_postgres_quotes_them() {
        assert_eq!(quoted("orders"), "orders");
        assert_eq!(quoted("Orders"), "\"Orders\"");
        assert_eq!(quoted("my table"), "\"my table\"");
        assert_eq!(quoted("1st"), "\"1st\"");
        assert_eq!(quoted_list(&["a", "B"]), "a, \"B\"");
    }

    #[test]
    fn sizes_are_written_as_postgres_writes_them() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(8192), "8192 bytes");
        assert_eq!(size_pretty(10240), "10 kB");
        assert_eq!(size_pretty(1_000_000), "977 kB");
        assert_eq!(size_pretty(123_456_789), "118 MB");
        assert_eq!(size_pretty(10 * (1 << 40)), "10 TB");
    }
}
