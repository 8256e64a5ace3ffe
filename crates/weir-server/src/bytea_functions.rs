//! `bytea` functions as PostgreSQL has them where DataFusion's differ:
//! `octet_length` of a `bytea` (DataFusion's takes only text), and
//! `encode`'s `escape` format and its `base64` as PostgreSQL writes it
//! (padded, lines broken at 76 characters); `hex` stays DataFusion's.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// Registers the functions in `ctx`, over DataFusion's of the same names.
pub fn register(ctx: &SessionContext) {
    ctx.register_udf(ScalarUDF::new_from_impl(OctetLength::default()));
    ctx.register_udf(ScalarUDF::new_from_impl(Encode {
        inner: datafusion::functions::encoding::encode(),
    }));
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
        let rows = args.number_rows;
        let input = args.args[0].to_array(rows)?;
        // The length kernel counts bytes of text and of binary alike.
        let lengths = cast(&length(&input)?, &DataType::Int32)?;
        Ok(match args.args[0] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&lengths, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(lengths),
        })
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
        let format = match &args.args[1] {
            ColumnarValue::Scalar(
                ScalarValue::Utf8(Some(f))
                | ScalarValue::Utf8View(Some(f))
                | ScalarValue::LargeUtf8(Some(f)),
            ) => f.to_ascii_lowercase(),
            _ => return self.inner.invoke_with_args(args),
        };
        let output = args.return_field.data_type().clone();
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let converted = match format.as_str() {
            "escape" => cast(
                &encode_escape(&args.args[0].to_array(args.number_rows)?)?,
                &output,
            )?,
            "base64" => {
                args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some("base64pad".into())));
                let padded = self.inner.invoke_with_args(args)?.into_array(1)?;
                cast(&break_lines(&cast(&padded, &DataType::Utf8)?), &output)?
            }
            _ => return self.inner.invoke_with_args(args),
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&converted, 0)?)
        } else {
            ColumnarValue::Array(converted)
        })
    }
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
    use datafusion::arrow::array::BinaryArray;

    #[test]
    fn escape_writes_octal_for_zero_high_bytes_and_backslash() {
        let input: ArrayRef = Arc::new(BinaryArray::from_iter_values([b"A\x00\\\x7f\x80\xff"]));
        let text = encode_escape(&input).unwrap();
        assert_eq!(text.as_string::<i32>().value(0), "A\\000\\\\\x7f\\200\\377");
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
