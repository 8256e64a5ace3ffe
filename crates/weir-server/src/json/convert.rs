//! SQL values to JSON, as PostgreSQL's `to_jsonb` converts them
//! ([`JsonColumn`]), and JSON values to the text of a JSON type
//! ([`write`]).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, StringArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Float64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::Result;

use super::scalar::parse;
use super::value::{self, Json, Kind};
use super::JsonKind;

/// A column whose values convert to JSON: numbers and booleans as
/// themselves, JSON as its value, lists as arrays, structs as objects,
/// NaN, infinities and everything else as strings (dates and times in
/// ISO 8601). The casts are done once for the column; [`Self::value`]
/// builds one row's value.
pub struct JsonColumn {
    nulls: Option<NullBuffer>,
    values: Values,
}

enum Values {
    Null,
    Bool(BooleanArray),
    /// Integers and decimals, as printed.
    Number(StringArray),
    Float(Float64Array),
    Text(StringArray),
    Json(StringArray, JsonKind),
    List(OffsetBuffer<i32>, Box<JsonColumn>),
    Struct(Vec<(String, JsonColumn)>),
}

impl JsonColumn {
    /// Prepares `array`, whose field is `field`.
    pub fn new(array: &ArrayRef, field: &Field) -> Result<Self> {
        let values = match array.data_type() {
            DataType::Null => Values::Null,
            DataType::Boolean => Values::Bool(array.as_boolean().clone()),
            t if t.is_integer()
                || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) =>
            {
                Values::Number(cast(array, &DataType::Utf8)?.as_string::<i32>().clone())
            }
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Values::Float(
                cast(array, &DataType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone(),
            ),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                let text = cast(array, &DataType::Utf8)?.as_string::<i32>().clone();
                match JsonKind::of(field) {
                    Some(kind) => Values::Json(text, kind),
                    None => Values::Text(text),
                }
            }
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
                let lists = cast(array, &DataType::List(item.clone()))?;
                let lists = lists.as_list::<i32>();
                Values::List(
                    lists.offsets().clone(),
                    Box::new(JsonColumn::new(lists.values(), item)?),
                )
            }
            DataType::Struct(fields) => Values::Struct(
                fields
                    .iter()
                    .zip(array.as_struct().columns())
                    .map(|(f, column)| Ok((f.name().clone(), JsonColumn::new(column, f)?)))
                    .collect::<Result<_>>()?,
            ),
            _ => {
                let formatter = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())?;
                Values::Text(
                    (0..array.len())
                        .map(|i| array.is_valid(i).then(|| formatter.value(i).to_string()))
                        .collect(),
                )
            }
        };
        Ok(JsonColumn {
            nulls: array.logical_nulls(),
            values,
        })
    }

    /// Whether row `i` is NULL.
    pub fn is_null(&self, i: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(i))
    }

    /// Row `i` as JSON (a NULL as `null`).
    pub fn value(&self, i: usize) -> Result<Json> {
        if self.is_null(i) {
            return Ok(Json::new(Kind::Null));
        }
        Ok(Json::new(match &self.values {
            Values::Null => Kind::Null,
            Values::Bool(b) => Kind::Bool(b.value(i)),
            Values::Number(n) => Kind::Number(n.value(i).to_owned()),
            Values::Float(f) => float(f.value(i)),
            Values::Text(t) => Kind::String(t.value(i).to_owned()),
            Values::Json(t, kind) => return parse(t.value(i), *kind),
            Values::List(offsets, items) => {
                let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
                Kind::Array(
                    (start..end)
                        .map(|j| items.value(j))
                        .collect::<Result<_>>()?,
                )
            }
            Values::Struct(fields) => Kind::Object(
                fields
                    .iter()
                    .map(|(name, column)| Ok((name.clone(), column.value(i)?)))
                    .collect::<Result<_>>()?,
            ),
        }))
    }
}

/// A float as JSON: a number as numeric prints it, or NaN and the
/// infinities as strings.
fn float(f: f64) -> Kind {
    if f.is_nan() {
        return Kind::String("NaN".into());
    }
    if f.is_infinite() {
        return Kind::String(if f > 0.0 { "Infinity" } else { "-Infinity" }.into());
    }
    let text = f.to_string();
    match value::parse(&text).map(|j| j.kind) {
        Ok(number @ Kind::Number(_)) => number,
        _ => Kind::Number(text),
    }
}

/// `value` as the text of `kind`: `jsonb`'s normal form, or `json` as
/// PostgreSQL's builders write it ([`write_builder`]).
pub fn write(value: Json, kind: JsonKind) -> String {
    match kind {
        JsonKind::Jsonb => value.into_jsonb().to_jsonb_text(),
        JsonKind::Json => write_builder(&value, false),
    }
}

/// The `json` text PostgreSQL's builders write: `{"a" : 1, "b" : 2}`,
/// members in order (`{ "a" : 1 }`, padded, for `json_object_agg`),
/// `[1, 2]`; nested values in `jsonb`'s form.
pub fn write_builder(value: &Json, padded: bool) -> String {
    let mut out = String::new();
    match &value.kind {
        Kind::Object(members) => {
            out.push_str(if padded { "{ " } else { "{" });
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value::write_string(key, &mut out);
                out.push_str(" : ");
                item.write_jsonb(&mut out);
            }
            out.push_str(if padded { " }" } else { "}" });
        }
        _ => value.write_jsonb(&mut out),
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int32Array, ListArray};
    use datafusion::arrow::datatypes::Int32Type;

    use super::*;

    fn texts(array: ArrayRef) -> Vec<String> {
        let field = Field::new("x", array.data_type().clone(), true);
        let column = JsonColumn::new(&array, &field).unwrap();
        (0..array.len())
            .map(|i| column.value(i).unwrap().to_jsonb_text())
            .collect()
    }

    #[test]
    fn columns_convert_as_to_jsonb_does() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None]));
        assert_eq!(texts(ints), ["1", "null"]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.5, 1e20, f64::NAN]));
        assert_eq!(texts(floats), ["1.5", "100000000000000000000", "\"NaN\""]);
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None]),
            None,
            Some(vec![]),
        ]));
        assert_eq!(texts(lists), ["[1, null]", "null", "[]"]);
    }

    #[test]
    fn json_builders_write_members_in_order() {
        let value = value::parse(r#"{"b": {"y": 1, "x": 2}, "a": [1,2]}"#).unwrap();
        assert_eq!(
            write_builder(&value, false),
            r#"{"b" : {"y": 1, "x": 2}, "a" : [1, 2]}"#
        );
        assert_eq!(
            write_builder(&value, true)
                .chars()
                .take(2)
                .collect::<String>(),
            "{ "
        );
    }
}
