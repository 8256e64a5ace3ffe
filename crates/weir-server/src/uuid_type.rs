//! `uuid` as PostgreSQL types, reads and writes it.
//!
//! A `uuid` is stored as its canonical text (`a0eebc99-9c0b-4ef8-bb6d-
//! 6bb9bd380a11`: lowercase, 36 bytes) in a text field tagged
//! `pg.type = uuid`, so that clients see OID 2950 and, in binary, its 16
//! bytes (the vendored arrow-pg writes and reads them). Text becomes a
//! `uuid` through [`input`]: every cast to `uuid`, every write to a `uuid`
//! column, and a string literal compared with a `uuid` (also in an `IN`
//! list: [`UuidLists`]). It reads
//! PostgreSQL's input forms (either case, a hyphen after any group of four
//! digits, braces around) and fails with 22P02 on anything else.
//! Canonical text sorts as PostgreSQL sorts uuids (byte by byte), so
//! comparisons, keys, indexes and `ORDER BY` work on the text.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::DataType as SqlType;

use crate::error::{SqlState, WeirError};

/// `uuid`'s `pg_type` OID.
pub const OID: u32 = 2950;

/// The metadata that tags a text field as `uuid`.
fn metadata() -> HashMap<String, String> {
    HashMap::from([(
        arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
        "uuid".to_owned(),
    )])
}

/// A nullable `uuid` field.
pub fn field(name: &str) -> FieldRef {
    Arc::new(Field::new(name, DataType::Utf8, true).with_metadata(metadata()))
}

/// `field` tagged `uuid`.
pub fn tag(field: Field) -> Field {
    field.with_metadata(metadata())
}

/// Whether `field` is tagged `uuid`.
pub fn is_uuid(field: &Field) -> bool {
    field
        .metadata()
        .get(arrow_pg::datatypes::PG_TYPE_KEY)
        .is_some_and(|t| t == "uuid")
}

/// The declared type of a column whose field is `field`: `uuid` where it
/// is tagged so.
pub fn declared(field: &Field) -> Option<crate::catalog::DeclaredType> {
    is_uuid(field).then_some(crate::catalog::DeclaredType {
        oid: OID,
        typmod: -1,
    })
}

/// `text` read as a `uuid` (see the module documentation).
pub fn input(text: Expr) -> Expr {
    ScalarUDF::from(UuidFunction::new(Op::Input)).call(vec![text])
}

/// `gen_random_uuid()`: a random (version 4) `uuid`.
pub fn gen_random_uuid() -> ScalarUDF {
    ScalarUDF::from(UuidFunction::new(Op::Random))
}

/// The field `uuid` is planned as: tagged text (the session's type
/// planner, `json/planner.rs`, asks).
pub fn plan_type(sql_type: &SqlType) -> Option<FieldRef> {
    matches!(sql_type, SqlType::Uuid).then(|| field(""))
}

/// The analyzer rule reading the string literals of an `IN` list as uuids
/// when the value they are compared with is one (`id IN ('A0EE...')`;
/// a comparison's literal is read so by `unknown_literals.rs`).
#[derive(Debug)]
pub struct UuidLists;

impl UuidLists {
    fn rewrite(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let Expr::InList(mut in_list) = expr else {
            return Ok(Transformed::no(expr));
        };
        let of_uuids = in_list
            .expr
            .to_field(schema)
            .is_ok_and(|(_, field)| is_uuid(&field));
        if !of_uuids {
            return Ok(Transformed::no(Expr::InList(in_list)));
        }
        let mut changed = false;
        for item in in_list.list.iter_mut() {
            if matches!(item, Expr::Literal(ScalarValue::Utf8(Some(_)), _)) {
                *item = input(std::mem::replace(
                    item,
                    Expr::Literal(ScalarValue::Null, None),
                ));
                changed = true;
            }
        }
        Ok(Transformed::new_transformed(Expr::InList(in_list), changed))
    }
}

impl AnalyzerRule for UuidLists {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_rewrite::rewrite_expressions(plan, &Self::rewrite)
    }

    fn name(&self) -> &str {
        "weir_uuid_lists"
    }
}

/// What a [`UuidFunction`] does.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Op {
    /// Text read as a uuid.
    Input,
    /// A random uuid.
    Random,
}

/// The functions producing `uuid` values.
#[derive(Debug, PartialEq, Eq, Hash)]
struct UuidFunction {
    op: Op,
    signature: Signature,
}

impl UuidFunction {
    fn new(op: Op) -> Self {
        let signature = match op {
            Op::Input => Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
            Op::Random => Signature::nullary(Volatility::Volatile),
        };
        UuidFunction { op, signature }
    }
}

impl ScalarUDFImpl for UuidFunction {
    fn name(&self) -> &str {
        match self.op {
            Op::Input => "weir_uuid_in",
            Op::Random => "gen_random_uuid",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(field(self.name()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match self.op {
            Op::Input => make_scalar_function(|inputs: &[ArrayRef]| canonical(&inputs[0]), vec![])(
                &args.args,
            ),
            // DataFusion's `uuid()` writes version 4 uuids in canonical text.
            Op::Random => datafusion::functions::string::uuid().invoke_with_args(args),
        }
    }
}

/// `input` (text) as canonical uuids, or 22P02 for the first value that
/// is not one.
fn canonical(input: &ArrayRef) -> Result<ArrayRef> {
    let strings = input.as_string::<i32>();
    let mut out = StringBuilder::with_capacity(strings.len(), strings.len() * 36);
    for value in strings.iter() {
        match value {
            None => out.append_null(),
            Some(text) => {
                let bytes = parse(text).ok_or_else(|| {
                    DataFusionError::External(Box::new(WeirError::new(
                        SqlState::INVALID_TEXT_REPRESENTATION,
                        format!("invalid input syntax for type uuid: \"{text}\""),
                    )))
                })?;
                out.append_value(format(&bytes));
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The 16 bytes `text` writes in one of PostgreSQL's input forms: 32 hex
/// digits of either case, a hyphen allowed after any group of four, the
/// whole optionally in braces.
fn parse(text: &str) -> Option<[u8; 16]> {
    let inner = match text.strip_prefix('{') {
        Some(rest) => rest.strip_suffix('}')?,
        None => text,
    };
    let mut bytes = [0u8; 16];
    let mut digits = 0;
    let mut chars = inner.bytes().peekable();
    while let Some(c) = chars.next() {
        let nibble = (c as char).to_digit(16)? as u8;
        if digits == 32 {
            return None;
        }
        bytes[digits / 2] |= nibble << if digits % 2 == 0 { 4 } else { 0 };
        digits += 1;
        if digits % 4 == 0 && digits < 32 && chars.peek() == Some(&b'-') {
            chars.next();
        }
    }
    (digits == 32).then_some(bytes)
}

/// `bytes` in canonical text: lowercase, hyphens after 8, 12, 16 and 20
/// digits.
pub fn format(bytes: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(HEX[usize::from(byte >> 4)] as char);
        text.push(HEX[usize::from(byte & 0xf)] as char);
    }
    text
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;

    use super::*;

    #[test]
    fn postgresql_input_forms_are_read() {
        let canonical_form = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
        for text in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
            "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
        ] {
            assert_eq!(
                parse(text).map(|b| format(&b)).as_deref(),
                Some(canonical_form),
                "{text}"
            );
        }
    }

    #[test]
    fn malformed_text_is_refused() {
        for text in [
            "",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
            "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
            "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
            "a0e-ebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }

    #[test]
    fn a_column_becomes_canonical_or_fails_with_22p02() {
        let input: ArrayRef = Arc::new(StringArray::from(vec![
            Some("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
            None,
        ]));
        let out = canonical(&input).unwrap();
        let out: Vec<_> = out.as_string::<i32>().iter().collect();
        assert_eq!(
            out,
            vec![Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), None]
        );
        let bad: ArrayRef = Arc::new(StringArray::from(vec!["nope"]));
        let err = canonical(&bad).unwrap_err().to_string();
        assert!(err.contains("invalid input syntax for type uuid"), "{err}");
    }
}
