//! `to_regtype(name)`: the `pg_type` OID of a type name, or NULL.
//!
//! psycopg's `TypeInfo.fetch` (behind its adapters for named types) looks
//! types up with it. The names are PostgreSQL's own (`int4`, `_int4`) and
//! the SQL spellings (`integer`, `double precision`, `text[]`), with or
//! without `pg_catalog.`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray, Int32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility};
use pgwire::api::Type;

/// The SQL spellings of built-in types, by the name `pg_type` has.
const SQL_NAMES: &[(&str, &str)] = &[
    ("smallint", "int2"),
    ("integer", "int4"),
    ("int", "int4"),
    ("bigint", "int8"),
    ("real", "float4"),
    ("double precision", "float8"),
    ("boolean", "bool"),
    ("decimal", "numeric"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("char", "bpchar"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
    ("time without time zone", "time"),
    ("time with time zone", "timetz"),
];

/// OIDs of the built-in types by `pg_type` name.
static OIDS: LazyLock<HashMap<String, i32>> = LazyLock::new(|| {
    (0..16_384u32)
        .filter_map(|oid| Type::from_oid(oid).map(|t| (t.name().to_owned(), oid as i32)))
        .collect()
});

/// The OID of type `name`, as `to_regtype` resolves it.
fn oid_of(name: &str) -> Option<i32> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let (base, array) = match name.strip_suffix("[]") {
        Some(base) => (base.trim_end(), true),
        None => (name, false),
    };
    let base = SQL_NAMES
        .iter()
        .find(|(sql, _)| *sql == base)
        .map_or(base, |(_, pg)| pg);
    let key = if array {
        format!("_{base}")
    } else {
        base.to_owned()
    };
    OIDS.get(&key).copied()
}

/// The `to_regtype(text)` function.
pub fn to_regtype() -> ScalarUDF {
    let function = |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        let names = cast(&args[0].to_array(1)?, &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let oids: Int32Array = (0..names.len())
            .map(|i| names.is_valid(i).then(|| oid_of(names.value(i))).flatten())
            .collect();
        Ok(match &args[0] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&oids, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(oids)),
        })
    };
    ScalarUDF::from(SimpleScalarUDF::new(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(function),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_as_postgres_resolves_them() {
        assert_eq!(oid_of("numeric"), Some(1700));
        assert_eq!(oid_of("integer"), Some(23));
        assert_eq!(oid_of("pg_catalog.int4"), Some(23));
        assert_eq!(oid_of("Double Precision"), Some(701));
        assert_eq!(oid_of("text[]"), Some(1009));
        assert_eq!(oid_of("_int8"), Some(1016));
        assert_eq!(oid_of("timestamp with time zone"), Some(1184));
        assert_eq!(oid_of("no_such_type"), None);
    }
}
