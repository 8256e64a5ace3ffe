//! `varchar` as PostgreSQL types and casts it.
//!
//! A `varchar` value is stored as text (`Utf8`); its field is tagged with
//! `pg.type = varchar` so that clients see `character varying` (OID 1043)
//! for a `varchar` column, a view's column read from one, and a cast to
//! `varchar`. The length of `varchar(n)` is enforced on writes
//! (`dml/constraints.rs`, 22001); an explicit cast to `varchar(n)` cuts
//! the text to `n` characters, as PostgreSQL's does ([`cast`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result;
use datafusion::functions::utils::make_scalar_function;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{CharacterLength, DataType as SqlType};

/// The field metadata key marking a cast to `varchar` that [`cast`] has
/// not yet written: the `n` of `varchar(n)`, or empty for `varchar`.
const CAST_LIMIT_KEY: &str = "weir.varchar.cast";

/// `varchar`'s `pg_type` OID.
pub const OID: u32 = 1043;

/// The declared type of a column whose field is `field`: `varchar` where
/// it is tagged so (a view's or a source's column; a table's column keeps
/// the type it was created with, with its length).
pub fn declared(field: &Field) -> Option<crate::catalog::DeclaredType> {
    is_varchar(field).then_some(crate::catalog::DeclaredType {
        oid: OID,
        typmod: -1,
    })
}

/// The metadata that tags a text field as `varchar`.
pub fn metadata() -> HashMap<String, String> {
    HashMap::from([(
        arrow_pg::datatypes::PG_TYPE_KEY.to_owned(),
        "varchar".to_owned(),
    )])
}

/// Whether `field` is tagged `varchar`.
pub fn is_varchar(field: &Field) -> bool {
    field
        .metadata()
        .get(arrow_pg::datatypes::PG_TYPE_KEY)
        .is_some_and(|t| t == "varchar")
}

/// The field of a cast to `varchar` (`limit`: its `n`), for [`cast`] to
/// write.
fn cast_field(limit: Option<u64>) -> FieldRef {
    let mut metadata = metadata();
    let limit = limit.map(|n| n.to_string()).unwrap_or_default();
    metadata.insert(CAST_LIMIT_KEY.to_owned(), limit);
    Arc::new(Field::new("", DataType::Utf8, true).with_metadata(metadata))
}

/// `cast` (of `text`, its operand already made text) to the `varchar` of
/// `field`: cut to `n` characters for `varchar(n)`, and tagged `varchar`.
pub fn cast(text: Expr, field: &Field) -> Expr {
    let limit = field
        .metadata()
        .get(CAST_LIMIT_KEY)
        .and_then(|n| n.parse::<usize>().ok());
    let text = match limit {
        Some(limit) => ScalarUDF::from(Cut::new(limit)).call(vec![text]),
        None => text,
    };
    let done = Field::new("", DataType::Utf8, true).with_metadata(self::metadata());
    Expr::Cast(Cast::new_from_field(Box::new(text), Arc::new(done)))
}

/// Whether `field` is a cast's `varchar` not yet done by [`cast`].
pub fn is_cast_to_do(field: &Field) -> bool {
    is_varchar(field) && field.metadata().contains_key(CAST_LIMIT_KEY)
}

/// The field `varchar`, `varchar(n)` and their spellings are planned as:
/// tagged text (the session's type planner, `json/planner.rs`, asks).
pub fn plan_type(sql_type: &SqlType) -> Option<FieldRef> {
    match sql_type {
        SqlType::Varchar(length)
        | SqlType::CharacterVarying(length)
        | SqlType::CharVarying(length) => Some(cast_field(match length {
            Some(CharacterLength::IntegerLength { length, .. }) => Some(*length),
            _ => None,
        })),
        _ => None,
    }
}

/// Text cut to at most `limit` characters (a cast to `varchar(n)`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Cut {
    limit: usize,
    signature: Signature,
}

impl Cut {
    fn new(limit: usize) -> Self {
        Cut {
            limit,
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Cut {
    fn name(&self) -> &str {
        "weir_varchar_cut"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let limit = self.limit;
        make_scalar_function(
            move |inputs: &[ArrayRef]| Ok(cut(&inputs[0], limit)),
            vec![],
        )(&args.args)
    }
}

/// `input` (text) with every value longer than `limit` characters cut to
/// its first `limit`; the input itself when none is. Values of at most
/// `limit` bytes are not looked into.
fn cut(input: &ArrayRef, limit: usize) -> ArrayRef {
    let strings = input.as_string::<i32>();
    let too_long = |s: &str| s.len() > limit && s.chars().nth(limit).is_some();
    if !strings.iter().flatten().any(too_long) {
        return Arc::clone(input);
    }
    let mut out = StringBuilder::with_capacity(strings.len(), strings.value_data().len());
    for value in strings.iter() {
        match value {
            Some(s) if too_long(s) => {
                let end = s.char_indices().nth(limit).map_or(s.len(), |(i, _)| i);
                out.append_value(&s[..end]);
            }
            other => out.append_option(other),
        }
    }
    Arc::new(out.finish())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;

    use super::*;

    #[test]
    fn values_are_cut_by_characters() {
        let input: ArrayRef = Arc::new(StringArray::from(vec![
            Some("abc"),
            None,
            Some("ab"),
            Some("héllo"),
        ]));
        let out = cut(&input, 2);
        let out = out.as_string::<i32>();
        let values: Vec<_> = out.iter().collect();
        assert_eq!(values, vec![Some("ab"), None, Some("ab"), Some("hé")]);
    }

    #[test]
    fn short_values_are_the_input_itself() {
        // "héé" is 5 bytes but 3 characters: not cut at 3.
        let input: ArrayRef = Arc::new(StringArray::from(vec![Some("héé"), Some("x")]));
        let out = cut(&input, 3);
        assert!(Arc::ptr_eq(&out, &input));
    }
}
