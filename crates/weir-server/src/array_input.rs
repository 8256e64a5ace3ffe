//! PostgreSQL's text form of a one-dimensional array, `{1,2,NULL}` or
//! `{"a b",c}`, as `array_in` reads it: what `'{4,5}'::int[]` casts and
//! what drivers that send arrays as text (node-postgres) write. Arrow
//! reads such text as one element of the array's type and fails.
//!
//! Elements are separated by commas; whitespace around an element is
//! dropped; an element in double quotes is taken as written (a backslash
//! escapes the next character), never as NULL; elsewhere a backslash
//! escapes the next character and an unquoted `NULL` (any case) is NULL.
//! The elements are returned as text, for the element type's own input.
//! [`ArrayLike`] reads the literal of `x = ANY('{2,4}')` with `x`'s type.

use std::sync::Arc;

use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// Why a text is not a one-dimensional array.
#[derive(Debug, PartialEq, Eq)]
pub enum ArrayInputError {
    /// Not an array literal (22P02, `malformed array literal`).
    Malformed,
    /// An array of arrays, which Weir's array columns do not hold (0A000).
    Nested,
}

/// The elements of `text`, `None` for NULL.
pub fn parse_array(text: &str) -> Result<Vec<Option<String>>, ArrayInputError> {
    let body = text
        .trim()
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .ok_or(ArrayInputError::Malformed)?;
    if body.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut elements = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let element = match chars.peek() {
            Some('"') => {
                chars.next();
                let mut value = String::new();
                loop {
                    match chars.next().ok_or(ArrayInputError::Malformed)? {
                        '"' => break,
                        '\\' => value.push(chars.next().ok_or(ArrayInputError::Malformed)?),
                        c => value.push(c),
                    }
                }
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
                Some(value)
            }
            Some('{') => return Err(ArrayInputError::Nested),
            _ => {
                let mut value = String::new();
                // The length of `value` up to its last escaped character:
                // trailing whitespace after it is the element's own.
                let mut kept = 0;
                let mut escaped = false;
                while let Some(&c) = chars.peek() {
                    match c {
                        ',' => break,
                        '{' | '}' | '"' => return Err(ArrayInputError::Malformed),
                        '\\' => {
                            chars.next();
                            value.push(chars.next().ok_or(ArrayInputError::Malformed)?);
                            kept = value.len();
                            escaped = true;
                            continue;
                        }
                        c => value.push(c),
                    }
                    chars.next();
                }
                let trimmed = value.trim_end().len().max(kept);
                value.truncate(trimmed);
                if value.is_empty() {
                    return Err(ArrayInputError::Malformed);
                }
                (escaped || !value.eq_ignore_ascii_case("null")).then_some(value)
            }
        };
        elements.push(element);
        match chars.next() {
            None => return Ok(elements),
            Some(',') => {}
            Some(_) => return Err(ArrayInputError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(text: &str) -> Vec<Option<String>> {
        parse_array(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn some(values: &[&str]) -> Vec<Option<String>> {
        values.iter().map(|v| Some(v.to_string())).collect()
    }

    #[test]
    fn reads_plain_quoted_and_null_elements() {
        assert_eq!(elements("{1,2,3}"), some(&["1", "2", "3"]));
        assert_eq!(elements(" { 4 , 5 } "), some(&["4", "5"]));
        assert_eq!(elements("{}"), Vec::<Option<String>>::new());
        assert_eq!(elements("{ }"), Vec::<Option<String>>::new());
        assert_eq!(
            elements(r#"{"a b",c,NULL,"NULL",null}"#),
            vec![
                Some("a b".into()),
                Some("c".into()),
                None,
                Some("NULL".into()),
                None
            ]
        );
        assert_eq!(
            elements(r#"{"say \"hi\"","a,b",x\,y,"" }"#),
            some(&["say \"hi\"", "a,b", "x,y", ""])
        );
        assert_eq!(elements(r"{a\ }"), some(&["a "]));
        assert_eq!(elements(r"{\NULL}"), some(&["NULL"]));
    }

    #[test]
    fn refuses_what_is_no_one_dimensional_array() {
        for text in [
            "", "1,2", "{1,2", "1,2}", "{1,,2}", "{,}", "{1,}", r#"{"a}"#, "{a\"b}",
        ] {
            assert_eq!(parse_array(text), Err(ArrayInputError::Malformed), "{text}");
        }
        assert_eq!(parse_array("{{1,2},{3,4}}"), Err(ArrayInputError::Nested));
    }
}

/// `weir_array_like(text, sample)`: `text` read as an array of `sample`'s
/// type. Weir's parser writes it for `x = ANY('{2,4}')`, whose literal
/// PostgreSQL reads as an array of `x`'s type (`weir_sql::pg_forms`);
/// only the sample's type is used.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ArrayLike {
    signature: Signature,
}

impl Default for ArrayLike {
    fn default() -> Self {
        ArrayLike {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ArrayLike {
    fn name(&self) -> &str {
        "weir_array_like"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let element = match &args[1] {
            DataType::Null => DataType::Utf8,
            other => other.clone(),
        };
        Ok(DataType::List(Arc::new(Field::new_list_field(
            element, true,
        ))))
    }

    /// A literal's array is read once and returned as a scalar, whatever
    /// the sample (a column) is.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (text, scalar) = crate::functions::argument_array(&args.args[0])?;
        let zone = args.config_options.execution.time_zone.as_deref();
        let output = args.return_field.data_type();
        let arrays = crate::casts::text_to_array(&cast(&text, &DataType::Utf8)?, output, zone)?;
        crate::functions::shaped(arrays, scalar)
    }
}
