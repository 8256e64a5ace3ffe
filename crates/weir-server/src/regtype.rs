//! `regtype`: a type's OID, written as the type's name.
//!
//! `to_regtype(name)` gives the `pg_type` OID of a type name, or NULL, as a
//! `regtype` ([`regtype_field`]); `pg_typeof` returns one too, and
//! `weir_regtype(oid)` makes one of an OID (`typelem::regtype`).
//!
//! psycopg's `TypeInfo.fetch` (behind its adapters for named types) looks
//! types up with it. The names are PostgreSQL's own (`int4`, `_int4`) and
//! the SQL spellings (`integer`, `double precision`, `text[]`), with or
//! without `pg_catalog.`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int32Type};
use datafusion::common::Result;
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
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

/// A `regtype` result column: the type's OID, which the wire writes as
/// the type's name in text (the patched arrow-pg's `regtype_name`) and as
/// the OID in binary.
pub fn regtype_field(name: &str) -> FieldRef {
    Arc::new(
        Field::new(name, DataType::Int32, true).with_metadata(HashMap::from([
            (
                arrow_pg::datatypes::PG_OID_ALIAS_KEY.to_owned(),
                "regtype".to_owned(),
            ),
            (
                arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
                "regtype".to_owned(),
            ),
        ])),
    )
}

/// Whether `field` holds `regtype` values (not a catalog column of type
/// OIDs, which datafusion-pg-catalog tags `regtype` too).
pub fn is_regtype(field: &Field) -> bool {
    field
        .metadata()
        .get(arrow_pg::datatypes::PG_TYPE_KEY)
        .is_some_and(|kind| kind == "regtype")
}

/// What a [`RegtypeOf`] function reads.
#[derive(Debug, PartialEq, Eq, Hash)]
enum RegtypeInput {
    /// `to_regtype(text)`: a type name; NULL for an unknown one.
    Name,
    /// `weir_regtype(oid)`: an OID, what `expr::regtype` of a column or
    /// another non-text expression becomes (datafusion-pg-catalog's
    /// rewrite), so that `typelem::regtype::text` is the type's name as in
    /// PostgreSQL (asyncpg's type introspection reads it so) rather than
    /// the OID's digits.
    Oid,
}

/// A function giving a `regtype` (see [`RegtypeInput`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct RegtypeOf {
    input: RegtypeInput,
    signature: Signature,
}

impl ScalarUDFImpl for RegtypeOf {
    fn name(&self) -> &str {
        match self.input {
            RegtypeInput::Name => "to_regtype",
            RegtypeInput::Oid => "weir_regtype",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(regtype_field(self.name()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let lookup = |inputs: &[ArrayRef]| -> Result<ArrayRef> {
            if self.input == RegtypeInput::Oid {
                return Ok(cast(&inputs[0], &DataType::Int32)?);
            }
            let names = cast(&inputs[0], &DataType::Utf8)?;
            let names = names.as_string::<i32>();
            let oids: Int32Array = (0..names.len())
                .map(|i| names.is_valid(i).then(|| oid_of(names.value(i))).flatten())
                .collect();
            Ok(Arc::new(oids))
        };
        make_scalar_function(lookup, vec![])(&args.args)
    }
}

/// The `to_regtype(text)` function.
pub fn to_regtype() -> ScalarUDF {
    ScalarUDF::new_from_impl(RegtypeOf {
        input: RegtypeInput::Name,
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable),
    })
}

/// The `weir_regtype(oid)` function.
pub fn oid_regtype() -> ScalarUDF {
    ScalarUDF::new_from_impl(RegtypeOf {
        input: RegtypeInput::Oid,
        signature: Signature::uniform(
            1,
            vec![DataType::Int32, DataType::Int64, DataType::UInt32],
            Volatility::Immutable,
        ),
    })
}

/// `regtype` values as text: each type's name (`regtype::text`).
pub fn names(oids: &ArrayRef) -> Result<ArrayRef> {
    let oids = cast(oids, &DataType::Int32)?;
    let names: StringArray = oids
        .as_primitive::<Int32Type>()
        .iter()
        .map(|oid| oid.map(|oid| arrow_pg::datatypes::regtype_name(oid as u32)))
        .collect();
    Ok(Arc::new(names))
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
