//! `to_char(value, pattern)` with PostgreSQL's patterns (`YYYY-MM-DD
//! HH24:MI:SS`). DataFusion's `to_char` takes chrono's (`%Y-%m-%d`) and
//! echoed PostgreSQL patterns back as text; this wrapper translates the
//! pattern and calls it.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// PostgreSQL template patterns and chrono's equivalents, longest first.
const PATTERNS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("YYYY", "%Y"),
    ("Month", "%B"),
    ("MONTH", "%B"),
    ("month", "%B"),
    ("DDD", "%j"),
    ("Mon", "%b"),
    ("MON", "%b"),
    ("mon", "%b"),
    ("Day", "%A"),
    ("DAY", "%A"),
    ("day", "%A"),
    ("YY", "%y"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("Dy", "%a"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("am", "%P"),
    ("pm", "%P"),
    ("TZ", "%Z"),
];

/// A PostgreSQL `to_char` pattern as a chrono format: patterns translated,
/// double-quoted text and other characters kept literally, `FM` (no
/// padding) honoured for numeric fields.
pub fn chrono_format(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut rest = pattern;
    let mut fill_mode = false;
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("FM") {
            fill_mode = true;
            rest = tail;
            continue;
        }
        if c == '"' {
            // Quoted text stands as it is, up to the closing quote.
            let quoted = &rest[1..];
            let (text, after) = match quoted.find('"') {
                Some(end) => (&quoted[..end], &quoted[end + 1..]),
                None => (quoted, ""),
            };
            text.chars().for_each(|ch| push_literal(&mut out, ch));
            rest = after;
            continue;
        }
        match PATTERNS.iter().find(|(pg, _)| rest.starts_with(pg)) {
            Some((pg, chrono)) => {
                let unpadded =
                    fill_mode && matches!(*chrono, "%m" | "%d" | "%H" | "%I" | "%M" | "%S");
                if unpadded {
                    out.push_str(&format!("%-{}", &chrono[1..]));
                } else {
                    out.push_str(chrono);
                }
                rest = &rest[pg.len()..];
            }
            None => {
                push_literal(&mut out, c);
                rest = &rest[c.len_utf8()..];
            }
        }
        fill_mode = false;
    }
    out
}

fn push_literal(out: &mut String, c: char) {
    if c == '%' {
        out.push_str("%%");
    } else {
        out.push(c);
    }
}

/// DataFusion's `to_char` behind a pattern translation.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgToChar {
    inner: ScalarUDF,
}

impl PgToChar {
    /// The function, named `to_char`.
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(PgToChar {
            inner: datafusion::functions::datetime::to_char().as_ref().clone(),
        })
    }
}

impl ScalarUDFImpl for PgToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(args)
    }

    fn return_field_from_args(
        &self,
        args: ReturnFieldArgs,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        self.inner.inner().return_field_from_args(args)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let Some(pattern) = args.args.get_mut(1) {
            *pattern = match &*pattern {
                ColumnarValue::Scalar(ScalarValue::Utf8(p)) => {
                    ColumnarValue::Scalar(ScalarValue::Utf8(p.as_deref().map(chrono_format)))
                }
                ColumnarValue::Array(array) if array.data_type() == &DataType::Utf8 => {
                    let translated: StringArray = array
                        .as_string::<i32>()
                        .iter()
                        .map(|p| p.map(chrono_format))
                        .collect();
                    ColumnarValue::Array(Arc::new(translated))
                }
                other => other.clone(),
            };
        }
        self.inner.inner().invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use super::chrono_format;

    #[test]
    fn postgres_patterns_become_chrono_formats() {
        assert_eq!(chrono_format("YYYY-MM-DD"), "%Y-%m-%d");
        assert_eq!(chrono_format("HH24:MI:SS.MS"), "%H:%M:%S.%3f");
        assert_eq!(chrono_format("Dy, DD Mon YYYY"), "%a, %d %b %Y");
        assert_eq!(chrono_format("FMMM/FMDD"), "%-m/%-d");
        assert_eq!(chrono_format("\"Q\"YY 100%"), "Q%y 100%%");
    }
}
