//! `json` and `jsonb`: PostgreSQL's JSON types, their operators and the
//! functions applications use most.
//!
//! A JSON value is an Arrow UTF-8 string whose field names an Arrow
//! extension type, `arrow.json` or `pg.jsonb` ([`JsonKind`]); the wire layer reports such a
//! column as PostgreSQL's `json` (OID 114) or `jsonb` (OID 3802), and
//! tables keep the kind in their catalog columns. `json` holds the text as
//! written (validated); `jsonb` holds PostgreSQL's normal form (keys sorted,
//! duplicates resolved, numbers as numeric prints them), so that equal
//! `jsonb` values are equal strings and group, join and compare as such.
//!
//! - [`value`]: the parser and the value tree.
//! - [`convert`]: SQL values to JSON (`to_jsonb`), JSON to text.
//! - [`scalar`]: input (casts and writes), `->`, `->>`, `#>`, `#>>`, `@>`,
//!   `<@`, `?`, `?|`, `?&`, `||` and the functions.
//! - [`aggregate`]: `json_agg`, `jsonb_agg`, `json_object_agg`,
//!   `jsonb_object_agg`.
//! - [`planner`]: the SQL type names and operators.
//!
//! Functions read and write values one at a time: a JSON text has to be
//! parsed value by value, there is no columnar kernel to hand it to.

pub mod aggregate;
pub mod convert;
pub mod planner;
pub mod scalar;
pub mod value;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_pg::datatypes::{JSONB_EXTENSION, JSON_EXTENSION};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::execution::context::SessionContext;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::Expr;
use serde::{Deserialize, Serialize};

/// The metadata key of an Arrow extension type's name
/// (`arrow_schema::extension::EXTENSION_TYPE_NAME_KEY`, which DataFusion
/// does not re-export).
const EXTENSION_TYPE_NAME_KEY: &str = "ARROW:extension:name";

/// Which of PostgreSQL's two JSON types a value has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JsonKind {
    /// `json`: the text as written.
    Json,
    /// `jsonb`: the normal form.
    Jsonb,
}

impl JsonKind {
    /// The kind `field` is tagged with, if any.
    pub fn of(field: &Field) -> Option<Self> {
        match field.extension_type_name() {
            Some(JSON_EXTENSION) => Some(JsonKind::Json),
            Some(JSONB_EXTENSION) => Some(JsonKind::Jsonb),
            _ => None,
        }
    }

    /// The type's SQL name.
    pub fn name(self) -> &'static str {
        match self {
            JsonKind::Json => "json",
            JsonKind::Jsonb => "jsonb",
        }
    }

    /// The type on the wire.
    pub fn pg_type(self) -> pgwire::api::Type {
        match self {
            JsonKind::Json => pgwire::api::Type::JSON,
            JsonKind::Jsonb => pgwire::api::Type::JSONB,
        }
    }

    /// The field metadata that tags a column with this kind: its Arrow
    /// extension name.
    pub fn metadata(self) -> HashMap<String, String> {
        let name = match self {
            JsonKind::Json => JSON_EXTENSION,
            JsonKind::Jsonb => JSONB_EXTENSION,
        };
        HashMap::from([(EXTENSION_TYPE_NAME_KEY.to_owned(), name.to_owned())])
    }

    /// A nullable field of this kind.
    pub fn field(self, name: &str) -> FieldRef {
        Arc::new(Field::new(name, DataType::Utf8, true).with_metadata(self.metadata()))
    }
}

/// `text` read as a value of `kind` (`text::jsonb`): validated, and for
/// `jsonb` put in normal form. Every write to a JSON column and every cast
/// to a JSON type goes through it.
pub fn input(kind: JsonKind, text: Expr) -> Expr {
    scalar::JsonFunction::udf(scalar::Op::Input(kind)).call(vec![text])
}

/// Adds the JSON types, operators and functions to `ctx`. Its type
/// planner plans JSON types, then `varchar` ([`crate::varchar`]) and
/// `uuid` ([`crate::uuid_type`]), then falls back to the one `ctx` had
/// (the catalog's).
pub fn register(ctx: &SessionContext) -> datafusion::common::Result<()> {
    use datafusion::execution::FunctionRegistry;
    let state = ctx.state_ref();
    let mut guard = state.write();
    // Moved out rather than cloned: a session's state holds every
    // function registry, and a copy left behind would be garbage.
    let existing = std::mem::replace(&mut *guard, SessionStateBuilder::new().build());
    let mut builder = SessionStateBuilder::new_from_existing(existing);
    let fallback = builder.type_planner().clone();
    let mut rebuilt = builder
        .with_type_planner(Arc::new(planner::TaggedTextTypes { fallback }))
        .build();
    for udf in scalar::functions() {
        rebuilt.register_udf(Arc::new(udf))?;
    }
    for udaf in aggregate::functions() {
        rebuilt.register_udaf(Arc::new(udaf))?;
    }
    rebuilt.register_expr_planner(Arc::new(planner::JsonOperators))?;
    *guard = rebuilt;
    Ok(())
}
