//! `bytea` functions as PostgreSQL has them where DataFusion's differ:
//! `octet_length` of a `bytea` (DataFusion's takes only text),
//! `encode`'s `escape` format and its `base64` as PostgreSQL writes it
//! (padded, lines broken at 76 characters), and `decode` of both (base64
//! with the line breaks in it); `hex` stays DataFusion's.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, BinaryArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::functions::{argument_array, shaped};

/// Registers the functions in `ctx`, over DataFusion's of the same names.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(OctetLength::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(Encode {
        inner: datafusion::functions::encoding::encode(),
    }));
    ctx.register_udf(ScalarUDF::new_from_impl(Decode {
        inner: datafusion::functions::encoding::decode(),
        signature: Signature::user_defined(Volatility::Immutable),
    }));
}

/// A function's format argument, lowercased, if it is a constant.
fn format_of(args: &ScalarFunctionArgs) -> Option<String> {
    match &args.args[1] {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(f))
            | ScalarValue::Utf8View(Some(f))
            | ScalarValue::LargeUtf8(Some(f)),
        ) => Some(f.to_ascii_lowercase()),
        _ => None,
    }
}

/// `octet_length(text or bytea)`: the number of bytes, an `integer`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct OctetLength {
    signature: Signature,
}

impl Default for OctetLength {
    fn default() -> Self {
        use DataType::*;
        OctetLength {
            signature: Signature::uniform(
                1,
                vec![Utf8, LargeUtf8, Utf8View, Binary, LargeBinary, BinaryView],
                Volatility::Immutable,
            ),
        }
    }
}

impl ScalarUDFImpl for OctetLength {
    fn name(&self) -> &str {
        "octet_length"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (input, scalar) = argument_array(&args.args[0])?;
        // The length kernel counts bytes of text and of binary alike.
        shaped(cast(&length(&input)?, &DataType::Int32)?, scalar)
    }
}

/// DataFusion's `encode`, with PostgreSQL's `escape` and `base64`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Encode {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for Encode {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(format) = format_of(&args) else {
            return self.inner.invoke_with_args(args).map_err(bad_value);
        };
        let output = args.return_field.data_type().clone();
        let (input, scalar) = argument_array(&args.args[0])?;
        let converted = match format.as_str() {
            "escape" => cast(&encode_escape(&input)?, &output)?,
            "base64" => {
                args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some("base64pad".into())));
                let padded = self.inner.invoke_with_args(args)?.into_array(1)?;
                cast(&break_lines(&cast(&padded, &DataType::Utf8)?), &output)?
            }
            _ => return self.inner.invoke_with_args(args).map_err(bad_value),
        };
        shaped(converted, scalar)
    }
}

/// DataFusion's `decode`, with PostgreSQL's `escape`, and `base64` that
/// skips whitespace (the line breaks `encode` writes). Its text is taken
/// as text: DataFusion's coerces it to `bytea`, which Weir's casts read
/// as `bytea` input, escapes and all.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Decode {
    inner: Arc<ScalarUDF>,
    /// Its own: [`Decode::coerce_types`] gives the types.
    signature: Signature,
}

impl ScalarUDFImpl for Decode {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if args.len() != 2 {
            return datafusion::common::plan_err!("decode takes a text and a format");
        }
        Ok(vec![DataType::Utf8, DataType::Utf8])
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (text, scalar) = argument_array(&args.args[0])?;
        let text = cast(&text, &DataType::Utf8)?;
        let bytes = match format_of(&args).as_deref() {
            Some("escape") => return shaped(decode_escape(&text)?, scalar),
            Some("base64") => cast(&without_whitespace(&text), &DataType::Binary)?,
            _ => cast(&text, &DataType::Binary)?,
        };
        args.args[0] = shaped(bytes, scalar)?;
        args.arg_fields[0] = Arc::new(datafusion::arrow::datatypes::Field::new(
            "bytes",
            DataType::Binary,
            true,
        ));
        self.inner.invoke_with_args(args).map_err(bad_value)
    }
}

/// DataFusion's `encode`/`decode` errors (a bad digit, an unknown
/// format) as PostgreSQL's 22023, not a syntax error.
fn bad_value(error: datafusion::error::DataFusionError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(crate::error::WeirError::new(
        crate::error::SqlState::INVALID_PARAMETER_VALUE,
        error.message().to_string(),
    )))
}

/// Text as `decode(text, 'escape')` reads it: `\\` is a backslash, `\ooo`
/// (three octal digits) a byte, any other character its UTF-8 bytes; a
/// backslash followed by anything else is 22P02.
fn decode_escape(text: &ArrayRef) -> Result<ArrayRef> {
    let bytes = text
        .as_string::<i32>()
        .iter()
        .map(|text| text.map(unescape).transpose())
        .collect::<Result<BinaryArray>>()?;
    Ok(Arc::new(bytes))
}

fn unescape(text: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, after)) = rest.split_first() {
        if b != b'\\' {
            bytes.push(b);
            rest = after;
            continue;
        }
        match after {
            [b'\\', tail @ ..] => {
                bytes.push(b'\\');
                rest = tail;
            }
            [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', tail @ ..] => {
                bytes.push((a - b'0') << 6 | (b - b'0') << 3 | (c - b'0'));
                rest = tail;
            }
            _ => {
                return Err(datafusion::error::DataFusionError::External(Box::new(
                    crate::error::WeirError::new(
                        crate::error::SqlState::INVALID_TEXT_REPRESENTATION,
                        "invalid input syntax for type bytea",
                    ),
                )))
            }
        }
    }
    Ok(bytes)
}

/// Each text without its ASCII whitespace.
fn without_whitespace(texts: &ArrayRef) -> ArrayRef {
    let joined: StringArray = texts
        .as_string::<i32>()
        .iter()
        .map(|text| text.map(|t| t.replace(|c: char| c.is_ascii_whitespace(), "")))
        .collect();
    Arc::new(joined)
}

/// Bytes as `encode(bytes, 'escape')` writes them: a zero byte, a byte
/// with the high bit set and `\` as `\ooo` (octal; `\` as `\\`), any other
/// byte as itself.
fn encode_escape(input: &ArrayRef) -> Result<ArrayRef> {
    let input = cast(input, &DataType::Binary)?;
    let texts: StringArray = input
        .as_binary::<i32>()
        .iter()
        .map(|bytes| {
            bytes.map(|bytes| {
                let mut text = String::with_capacity(bytes.len());
                for &b in bytes {
                    match b {
                        b'\\' => text.push_str("\\\\"),
                        0 | 0x80..=0xff => text.push_str(&format!("\\{b:03o}")),
                        _ => text.push(b as char),
                    }
                }
                text
            })
        })
        .collect();
    Ok(Arc::new(texts))
}

/// Base64 text with a line break after every 76 characters, as
/// PostgreSQL's `encode(..., 'base64')` writes it (RFC 2045).
fn break_lines(texts: &ArrayRef) -> ArrayRef {
    let broken: StringArray = texts
        .as_string::<i32>()
        .iter()
        .map(|text| {
            text.map(|text| {
                let lines: Vec<&str> = text
                    .as_bytes()
                    .chunks(76)
                    .map(|line| std::str::from_utf8(line).expect("base64 is ASCII"))
                    .collect();
                lines.join("\n")
            })
        })
        .collect();
    Arc::new(broken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_writes_octal_for_zero_high_bytes_and_backslash() {
        let input: ArrayRef = Arc::new(BinaryArray::from_iter_values([b"A\x00\\\x7f\x80\xff"]));
        let text = encode_escape(&input).unwrap();
        assert_eq!(text.as_string::<i32>().value(0), "A\\000\\\\\x7f\\200\\377");
    }

    #[test]
    fn escape_reads_back_what_it_writes() {
        let bytes = b"A\x00\\\x7f\x80\xff";
        let input: ArrayRef = Arc::new(BinaryArray::from_iter_values([bytes]));
        let text = cast(&encode_escape(&input).unwrap(), &DataType::Utf8).unwrap();
        let decoded = decode_escape(&text).unwrap();
        assert_eq!(decoded.as_binary::<i32>().value(0), bytes);
        assert!(unescape("a\\9").is_err());
        assert!(unescape("a\\").is_err());
    }

    #[test]
    fn base64_lines_break_at_76() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a".repeat(160)]));
        let broken = break_lines(&text);
        let lines: Vec<usize> = broken
            .as_string::<i32>()
            .value(0)
            .split('\n')
            .map(str::len)
            .collect();
        assert_eq!(lines, vec![76, 76, 8]);
    }
}
