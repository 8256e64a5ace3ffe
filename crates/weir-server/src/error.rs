//! Errors as users see them: each has a PostgreSQL SQLSTATE.
//!
//! Every failure that reaches a client goes through [`WeirError`]; the one
//! place that decides a DataFusion error's SQLSTATE is
//! [`WeirError::from_datafusion`].

use std::fmt;

use datafusion::arrow::datatypes::DataType;
use datafusion::error::DataFusionError;
use pgwire::error::{ErrorInfo, PgWireError};
use weir_stream::runtime::MemoryBudgetExceeded;

/// A PostgreSQL error condition (SQLSTATE code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlState(pub &'static str);

#[allow(missing_docs)]
impl SqlState {
    pub const SYNTAX_ERROR: SqlState = SqlState("42601");
    pub const CHARACTER_NOT_IN_REPERTOIRE: SqlState = SqlState("22021");
    pub const UNDEFINED_TABLE: SqlState = SqlState("42P01");
    pub const UNDEFINED_COLUMN: SqlState = SqlState("42703");
    pub const UNDEFINED_FUNCTION: SqlState = SqlState("42883");
    pub const UNDEFINED_OBJECT: SqlState = SqlState("42704");
    pub const DUPLICATE_TABLE: SqlState = SqlState("42P07");
    pub const DUPLICATE_COLUMN: SqlState = SqlState("42701");
    pub const AMBIGUOUS_COLUMN: SqlState = SqlState("42702");
    pub const WRONG_OBJECT_TYPE: SqlState = SqlState("42809");
    pub const INVALID_TABLE_DEFINITION: SqlState = SqlState("42P16");
    pub const DATATYPE_MISMATCH: SqlState = SqlState("42804");
    pub const GROUPING_ERROR: SqlState = SqlState("42803");
    pub const DIVISION_BY_ZERO: SqlState = SqlState("22012");
    pub const NUMERIC_OUT_OF_RANGE: SqlState = SqlState("22003");
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState("22P02");
    pub const INVALID_DATETIME_FORMAT: SqlState = SqlState("22007");
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState("22023");
    pub const BAD_COPY_FORMAT: SqlState = SqlState("22P04");
    pub const PROGRAM_LIMIT_EXCEEDED: SqlState = SqlState("54000");
    pub const UNIQUE_VIOLATION: SqlState = SqlState("23505");
    pub const NOT_NULL_VIOLATION: SqlState = SqlState("23502");
    pub const CARDINALITY_VIOLATION: SqlState = SqlState("21000");
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState("0A000");
    pub const UNDEFINED_PARAMETER: SqlState = SqlState("42P02");
    pub const PROTOCOL_VIOLATION: SqlState = SqlState("08P01");
    pub const OUT_OF_MEMORY: SqlState = SqlState("53200");
    pub const QUERY_CANCELED: SqlState = SqlState("57014");
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: SqlState = SqlState("55000");
    pub const IO_ERROR: SqlState = SqlState("58030");
    pub const INTERNAL_ERROR: SqlState = SqlState("XX000");
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25001");
    pub const READ_ONLY_SQL_TRANSACTION: SqlState = SqlState("25006");
    pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25P01");
    pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState("25P02");
    pub const INVALID_SAVEPOINT: SqlState = SqlState("3B001");
    pub const SERIALIZATION_FAILURE: SqlState = SqlState("40001");
}

/// An error reported to the client as an `ErrorResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeirError {
    /// The SQLSTATE.
    pub code: SqlState,
    /// The primary message, as PostgreSQL words it where we can.
    pub message: String,
    /// Optional `DETAIL` line.
    pub detail: Option<String>,
    /// Optional `HINT` line: what the user can do about it.
    pub hint: Option<String>,
}

/// Result alias for the server.
pub type WeirResult<T, E = WeirError> = std::result::Result<T, E>;

impl WeirError {
    /// An error with a code and message.
    pub fn new(code: SqlState, message: impl Into<String>) -> Self {
        WeirError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// Adds a `DETAIL` line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds a `HINT` line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// A construct Weir does not support (0A000).
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(SqlState::FEATURE_NOT_SUPPORTED, message)
    }

    /// A bug in Weir (XX000); the message says so.
    pub fn internal(message: impl fmt::Display) -> Self {
        Self::new(
            SqlState::INTERNAL_ERROR,
            format!("internal error (a bug in Weir): {message}"),
        )
    }

    /// Classifies a DataFusion error by its root cause.
    pub fn from_datafusion(error: DataFusionError) -> Self {
        let root = error.find_root();
        if let DataFusionError::External(inner) = root {
            if let Some(weir) = inner.downcast_ref::<WeirError>() {
                return weir.clone();
            }
            if let Some(memory) = inner.downcast_ref::<MemoryBudgetExceeded>() {
                return WeirError::new(SqlState::OUT_OF_MEMORY, memory.to_string()).with_hint(
                    "Start the server with a larger --view-memory-mb, or define the view to keep \
                     less state (fewer groups, a filter before a join); weir_view_operators shows \
                     each operator's state.",
                );
            }
        }
        let message = root_message(root);
        let code = match root {
            DataFusionError::SQL(..) => SqlState::SYNTAX_ERROR,
            DataFusionError::NotImplemented(m) if unknown_type(m).is_some() => {
                let name = unknown_type(m).unwrap_or_default();
                return WeirError::new(
                    SqlState::UNDEFINED_OBJECT,
                    format!("type \"{name}\" does not exist"),
                );
            }
            DataFusionError::NotImplemented(_) => SqlState::FEATURE_NOT_SUPPORTED,
            DataFusionError::SchemaError(e, _) => schema_error_code(&e.to_string()),
            DataFusionError::ArrowError(e, _) => arrow_error_code(&e.to_string()),
            DataFusionError::ResourcesExhausted(_) => SqlState::PROGRAM_LIMIT_EXCEEDED,
            DataFusionError::Internal(_) => SqlState::INTERNAL_ERROR,
            _ => message_code(&message),
        };
        if let Some((code, message)) = postgres_error(&message) {
            return WeirError::new(code, message);
        }
        let message = postgres_wording(code, &message).unwrap_or(message);
        WeirError::new(code, message)
    }
}

/// DataFusion and Arrow errors PostgreSQL reports with another SQLSTATE
/// than the wording alone suggests, with PostgreSQL's code and message.
fn postgres_error(message: &str) -> Option<(SqlState, String)> {
    let quoted = |prefix: &str| -> Option<&str> {
        let rest = message.split(prefix).nth(1)?;
        rest.split('\'').next()
    };
    // Text that has a date's shape but no such day is out of range (22008);
    // text without that shape is not a date at all (22007).
    let date_text = |text: &str, type_name: &str| {
        let bytes = text.trim().as_bytes();
        let digits = |range: std::ops::Range<usize>| {
            bytes
                .get(range)
                .is_some_and(|b| b.iter().all(u8::is_ascii_digit))
        };
        if digits(0..4) && bytes.get(4) == Some(&b'-') && digits(5..6) {
            (
                SqlState("22008"),
                format!("date/time field value out of range: \"{text}\""),
            )
        } else {
            (
                SqlState("22007"),
                format!("invalid input syntax for type {type_name}: \"{text}\""),
            )
        }
    };
    if let Some(text) = quoted("Cannot cast string '") {
        let target = message
            .rsplit("value of ")
            .next()?
            .trim_end_matches(" type");
        if target.starts_with("Date") {
            return Some(date_text(text, "date"));
        }
        let integer = match target {
            "Int16" => Some("smallint"),
            "Int32" => Some("integer"),
            "Int64" => Some("bigint"),
            _ => None,
        };
        let digits = text.trim().trim_start_matches(['+', '-']);
        if let Some(type_name) = integer {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return Some((
                    SqlState::NUMERIC_OUT_OF_RANGE,
                    format!(
                        "value \"{}\" is out of range for type {type_name}",
                        text.trim()
                    ),
                ));
            }
        }
    }
    if let Some(text) = quoted("Error parsing timestamp from '") {
        return Some(date_text(text, "timestamp"));
    }
    if message.starts_with("Cannot create filter with non-boolean predicate") {
        let type_name = message
            .rsplit("returning ")
            .next()
            .and_then(|t| t.trim().parse::<DataType>().ok())
            .map(|t| crate::types::pg_type_name(&t))
            .unwrap_or_else(|| "unknown".into());
        return Some((
            SqlState::DATATYPE_MISMATCH,
            format!("argument of WHERE must be type boolean, not type {type_name}"),
        ));
    }
    if message.starts_with("LIMIT must be >= 0") {
        return Some((SqlState("2201W"), "LIMIT must not be negative".into()));
    }
    if message.starts_with("OFFSET must be >= 0") {
        return Some((SqlState("2201X"), "OFFSET must not be negative".into()));
    }
    if let Some(value) = message.strip_prefix("invalid Unicode scalar value: ") {
        let text = if value.trim().starts_with('-') {
            "character number must be positive"
        } else {
            "requested character too large for encoding"
        };
        return Some((SqlState::INVALID_PARAMETER_VALUE, text.into()));
    }
    if message.contains("cannot take square root of a negative number") {
        return Some((
            SqlState("2201F"),
            "cannot take square root of a negative number".into(),
        ));
    }
    None
}

/// PostgreSQL's wording for the most common errors, so that messages match
/// what users and tools expect.
fn postgres_wording(code: SqlState, message: &str) -> Option<String> {
    let quoted = |open: char, close: char| -> Option<&str> {
        let start = message.find(open)? + 1;
        let end = start + message[start..].find(close)?;
        Some(&message[start..end])
    };
    match code {
        SqlState::UNDEFINED_TABLE => {
            let name = quoted('\'', '\'')?;
            let name = name.rsplit('.').next().unwrap_or(name);
            Some(format!("relation \"{name}\" does not exist"))
        }
        SqlState::UNDEFINED_COLUMN => {
            let rest = message.strip_prefix("No field named ")?;
            let end = [". ", ".\n"]
                .iter()
                .filter_map(|end| rest.find(end))
                .min()
                .unwrap_or(rest.len());
            let name = rest[..end].trim_end_matches('.').replace('"', "");
            Some(format!("column \"{name}\" does not exist"))
        }
        SqlState::UNDEFINED_FUNCTION => undefined_function(message),
        SqlState::DIVISION_BY_ZERO => Some("division by zero".to_owned()),
        SqlState::INVALID_TEXT_REPRESENTATION => {
            let value = quoted('\'', '\'')?;
            let arrow_type = message
                .rsplit("value of ")
                .next()?
                .trim_end_matches(" type");
            let pg_type = match arrow_type {
                "Int16" => "smallint",
                "Int32" => "integer",
                "Int64" => "bigint",
                "Float32" => "real",
                "Float64" => "double precision",
                "Boolean" => "boolean",
                t if t.starts_with("Decimal") => "numeric",
                _ => return None,
            };
            Some(format!(
                "invalid input syntax for type {pg_type}: \"{value}\""
            ))
        }
        _ => None,
    }
}

/// PostgreSQL types Weir does not support yet: naming one is 0A000, not
/// an unknown type.
const KNOWN_UNSUPPORTED_TYPES: &[&str] = &[
    "json",
    "jsonb",
    "uuid",
    "money",
    "inet",
    "cidr",
    "macaddr",
    "xml",
    "point",
    "line",
    "lseg",
    "box",
    "path",
    "polygon",
    "circle",
    "tsvector",
    "tsquery",
    "bit",
    "varbit",
    "serial",
    "bigserial",
    "smallserial",
    "oid",
    "int4range",
    "int8range",
    "numrange",
    "daterange",
    "tsrange",
    "tstzrange",
    "citext",
    "hstore",
    "timetz",
];

/// The type name of DataFusion's "Unsupported SQL type" error when it is not
/// a PostgreSQL type at all.
fn unknown_type(message: &str) -> Option<String> {
    let name = message.split("Unsupported SQL type ").nth(1)?.trim();
    let name = name.to_ascii_lowercase();
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (plain && !KNOWN_UNSUPPORTED_TYPES.contains(&name.as_str())).then_some(name)
}

/// The message of a DataFusion error without DataFusion's kind prefixes.
fn root_message(root: &DataFusionError) -> String {
    let text = match root {
        DataFusionError::ArrowError(e, _) => e.to_string(),
        DataFusionError::SchemaError(e, _) => e.to_string(),
        DataFusionError::Plan(m)
        | DataFusionError::Execution(m)
        | DataFusionError::NotImplemented(m)
        | DataFusionError::Configuration(m)
        | DataFusionError::ResourcesExhausted(m) => m.clone(),
        DataFusionError::SQL(e, _) => e.to_string(),
        other => other.to_string(),
    };
    let mut text = text.trim().to_owned();
    for prefix in [
        "Error during planning: ",
        "Execution error: ",
        "Arrow error: ",
        "Schema error: ",
        "Compute error: ",
        "Cast error: ",
        "Invalid argument error: ",
        "sql parser error: ",
        "This feature is not implemented: ",
        "Optimizer rule 'simplify_expressions' failed\ncaused by\n",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            text = rest.to_owned();
        }
    }
    text
}

/// PostgreSQL's sentence for DataFusion's report of a function that no
/// signature matches ("function sum(text) does not exist"), without the
/// internal errors and candidate list DataFusion wraps it in.
fn undefined_function(message: &str) -> Option<String> {
    const MARKER: &str = "No function matches the given name and argument types '";
    let call = message.split(MARKER).nth(1)?.split('\'').next()?;
    let (name, args) = call.strip_suffix(')')?.split_once('(')?;
    let args: Vec<String> = args
        .split(", ")
        .filter(|arg| !arg.is_empty())
        .map(|arg| match arg.parse::<DataType>() {
            Ok(data_type) => crate::types::pg_type_name(&data_type),
            Err(_) => arg.to_owned(),
        })
        .collect();
    Some(format!(
        "function {name}({}) does not exist",
        args.join(", ")
    ))
}

fn schema_error_code(message: &str) -> SqlState {
    if message.contains("No field named") || message.contains("not found") {
        SqlState::UNDEFINED_COLUMN
    } else if message.contains("Ambiguous reference") {
        SqlState::AMBIGUOUS_COLUMN
    } else if message.contains("duplicate qualified field")
        || message.contains("duplicate unqualified field")
    {
        SqlState::DUPLICATE_COLUMN
    } else {
        SqlState::SYNTAX_ERROR
    }
}

fn arrow_error_code(message: &str) -> SqlState {
    let lower = message.to_ascii_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        SqlState::DIVISION_BY_ZERO
    } else if lower.contains("overflow")
        || lower.contains("out of range")
        || lower.contains("can't cast value")
        || lower.contains("too large to store")
    {
        SqlState::NUMERIC_OUT_OF_RANGE
    } else if lower.contains("cannot cast string")
        || lower.contains("cannot cast value")
        || lower.contains("cannot parse")
    {
        SqlState::INVALID_TEXT_REPRESENTATION
    } else if lower.contains("error parsing timestamp") || lower.contains("parser error") {
        SqlState::INVALID_DATETIME_FORMAT
    } else {
        message_code(message)
    }
}

/// Codes for plan and execution errors, recognised by their wording.
fn message_code(message: &str) -> SqlState {
    let lower = message.to_ascii_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        SqlState::DIVISION_BY_ZERO
    } else if lower.contains("table '") && lower.contains("' not found") {
        SqlState::UNDEFINED_TABLE
    } else if lower.contains("no field named") {
        SqlState::UNDEFINED_COLUMN
    } else if lower.contains("invalid function") || lower.contains("no function matches") {
        SqlState::UNDEFINED_FUNCTION
    } else if lower.contains("cannot infer common")
        || lower.contains("cannot coerce")
        || lower.contains("there isn't a common type")
        || lower.contains("failed to coerce")
        || lower.contains("cannot be cast")
        || lower.contains("unsupported cast")
        || lower.contains("does not support")
            && (lower.contains("type") || lower.contains("operator"))
    {
        SqlState::DATATYPE_MISMATCH
    } else if lower.contains("overflow") {
        SqlState::NUMERIC_OUT_OF_RANGE
    } else if lower.contains("cannot cast string") || lower.contains("invalid input syntax") {
        SqlState::INVALID_TEXT_REPRESENTATION
    } else if lower.contains("more than one row") {
        SqlState::CARDINALITY_VIOLATION
    } else if lower.contains("a session gap") {
        SqlState::INVALID_PARAMETER_VALUE
    } else if lower.contains("order by") && lower.contains("out of bounds") {
        SqlState("42P10")
    } else if lower.contains("aggregate")
        && (lower.contains("not allowed") || lower.contains("cannot be nested"))
        || lower.contains("must appear in the group by")
        || lower.contains("projection references non-aggregate")
    {
        SqlState::GROUPING_ERROR
    } else if lower.contains("not implemented") || lower.contains("unsupported") {
        SqlState::FEATURE_NOT_SUPPORTED
    } else {
        SqlState::SYNTAX_ERROR
    }
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code.0)
    }
}

impl std::error::Error for WeirError {}

impl From<DataFusionError> for WeirError {
    fn from(e: DataFusionError) -> Self {
        WeirError::from_datafusion(e)
    }
}

impl From<datafusion::arrow::error::ArrowError> for WeirError {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        WeirError::from_datafusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}

impl From<weir_sql::ParseError> for WeirError {
    fn from(e: weir_sql::ParseError) -> Self {
        match e {
            weir_sql::ParseError::Syntax(m) => WeirError::new(SqlState::SYNTAX_ERROR, m),
            weir_sql::ParseError::InvalidEncoding(m) => {
                WeirError::new(SqlState::CHARACTER_NOT_IN_REPERTOIRE, m)
            }
            weir_sql::ParseError::TooComplex(m) => WeirError::new(SqlState("54001"), m),
            weir_sql::ParseError::Unsupported(m) => WeirError::unsupported(m),
        }
    }
}

impl From<weir_state::StateError> for WeirError {
    fn from(e: weir_state::StateError) -> Self {
        match e {
            weir_state::StateError::Arrow(a) => a.into(),
            other => WeirError::new(SqlState::IO_ERROR, other.to_string()),
        }
    }
}

impl From<WeirError> for PgWireError {
    fn from(e: WeirError) -> Self {
        let mut info = ErrorInfo::new("ERROR".to_owned(), e.code.0.to_owned(), e.message);
        info.detail = e.detail;
        info.hint = e.hint;
        PgWireError::UserError(Box::new(info))
    }
}

impl From<PgWireError> for WeirError {
    fn from(e: PgWireError) -> Self {
        match e {
            PgWireError::UserError(info) => WeirError {
                code: SqlState(leak_code(&info.code)),
                message: info.message,
                detail: info.detail,
                hint: info.hint,
            },
            other => WeirError::new(SqlState::PROTOCOL_VIOLATION, other.to_string()),
        }
    }
}

/// A SQLSTATE that came as a string (from pgwire, from the catalog) as a
/// `&'static str`: each distinct code is allocated once and kept.
pub(crate) fn leak_code(code: &str) -> &'static str {
    static CODES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if code.len() != 5 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return SqlState::INTERNAL_ERROR.0;
    }
    let mut codes = CODES.lock().expect("SQLSTATE lock");
    match codes.get(code) {
        Some(known) => known,
        None => {
            let leaked: &'static str = Box::leak(code.to_owned().into_boxed_str());
            codes.insert(leaked);
            leaked
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn code_of(sql: &str) -> &'static str {
        let ctx = SessionContext::new();
        let result = async { ctx.sql(sql).await?.collect().await }.await;
        WeirError::from(result.expect_err("query should fail"))
            .code
            .0
    }

    #[tokio::test]
    async fn datafusion_errors_get_postgres_codes() {
        assert_eq!(code_of("SELECT * FROM missing").await, "42P01");
        assert_eq!(code_of("SELECT nope FROM (SELECT 1 AS a)").await, "42703");
        assert_eq!(code_of("SELECT 1 / 0").await, "22012");
        assert_eq!(code_of("SELECT CAST('abc' AS INT)").await, "22P02");
        assert_eq!(code_of("SELECT no_such_fn(1)").await, "42883");
    }

    #[tokio::test]
    async fn functions_refusing_their_arguments_are_named_as_postgres_names_them() {
        let ctx = SessionContext::new();
        let result = async { ctx.sql("SELECT sum('x')").await?.collect().await }.await;
        let error = WeirError::from(result.expect_err("sum(text) should fail"));
        assert_eq!(error.code.0, "42883");
        assert_eq!(error.message, "function sum(text) does not exist");
    }

    #[test]
    fn common_messages_use_postgres_wording() {
        let cases = [
            (
                SqlState::UNDEFINED_TABLE,
                "table 'weir.public.nope' not found",
                "relation \"nope\" does not exist",
            ),
            (
                SqlState::UNDEFINED_COLUMN,
                "No field named nope. Did you mean 't.name'?",
                "column \"nope\" does not exist",
            ),
            (
                SqlState::DIVISION_BY_ZERO,
                "Divide by zero error",
                "division by zero",
            ),
            (
                SqlState::INVALID_TEXT_REPRESENTATION,
                "Cannot cast string 'x' to value of Int32 type",
                "invalid input syntax for type integer: \"x\"",
            ),
        ];
        for (code, datafusion, postgres) in cases {
            assert_eq!(
                postgres_wording(code, datafusion).as_deref(),
                Some(postgres)
            );
        }
    }
}
