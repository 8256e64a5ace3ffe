//! Scalar JSON functions: input, the operators, and the functions that
//! build and inspect values. One [`JsonFunction`] per SQL name, each
//! doing one [`Op`].

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};

use super::value::{self, Json, Kind, ParseError};
use super::JsonKind;
use crate::error::{SqlState, WeirError};

/// What a [`JsonFunction`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Text read as JSON: a cast or a write.
    Input(JsonKind),
    /// `->`: an object's member or an array's element.
    Get,
    /// `->>`: the same, as text.
    GetText,
    /// `#>` and `json[b]_extract_path`: the value at a path.
    Path,
    /// `#>>` and `json[b]_extract_path_text`: the same, as text.
    PathText,
    /// `@>`.
    Contains,
    /// `<@`.
    ContainedBy,
    /// `?`.
    HasKey,
    /// `?|`.
    HasAnyKey,
    /// `?&`.
    HasAllKeys,
    /// `jsonb || jsonb`.
    Concat,
    /// `json[b]_typeof`.
    TypeOf,
    /// `json[b]_array_length`.
    ArrayLength,
    /// `json[b]_build_object`.
    BuildObject(JsonKind),
    /// `json[b]_build_array`.
    BuildArray(JsonKind),
    /// `to_json[b]`.
    To(JsonKind),
}

/// A scalar function doing one [`Op`] under one SQL name.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonFunction {
    op: Op,
    name: &'static str,
    signature: Signature,
}

impl JsonFunction {
    fn udf(op: Op, name: &'static str) -> ScalarUDF {
        let signature = match op {
            Op::Input(_) | Op::TypeOf | Op::ArrayLength | Op::To(_) => {
                Signature::any(1, Volatility::Immutable)
            }
            Op::BuildObject(_) | Op::BuildArray(_) => Signature::one_of(
                vec![TypeSignature::VariadicAny, TypeSignature::Nullary],
                Volatility::Immutable,
            ),
            Op::Path | Op::PathText if name.contains("extract_path") => {
                Signature::variadic_any(Volatility::Immutable)
            }
            _ => Signature::any(2, Volatility::Immutable),
        };
        ScalarUDF::from(JsonFunction {
            op,
            name,
            signature,
        })
    }

    /// Whether this is a `json[b]_extract_path[_text]` call (its path
    /// steps are separate arguments, not one array).
    fn variadic_path(&self) -> bool {
        self.name.contains("extract_path")
    }
}

/// The function behind [`super::input`].
pub fn input_udf(kind: JsonKind) -> ScalarUDF {
    match kind {
        JsonKind::Json => JsonFunction::udf(Op::Input(kind), "weir_json_in"),
        JsonKind::Jsonb => JsonFunction::udf(Op::Input(kind), "weir_jsonb_in"),
    }
}

/// The function an operator is planned as.
pub fn operator_udf(op: Op) -> ScalarUDF {
    let name = match op {
        Op::Get => "weir_json_get",
        Op::GetText => "weir_json_get_text",
        Op::Path => "weir_json_path",
        Op::PathText => "weir_json_path_text",
        Op::Contains => "weir_json_contains",
        Op::ContainedBy => "weir_json_contained_by",
        Op::HasKey => "weir_json_has_key",
        Op::HasAnyKey => "weir_json_has_any_key",
        Op::HasAllKeys => "weir_json_has_all_keys",
        Op::Concat => "weir_jsonb_concat",
        _ => "weir_json_function",
    };
    JsonFunction::udf(op, name)
}

/// Every SQL-callable function of this module.
pub fn functions() -> Vec<ScalarUDF> {
    use JsonKind::{Json as J, Jsonb as B};
    vec![
        JsonFunction::udf(Op::TypeOf, "jsonb_typeof").with_aliases(["json_typeof"]),
        JsonFunction::udf(Op::ArrayLength, "jsonb_array_length")
            .with_aliases(["json_array_length"]),
        JsonFunction::udf(Op::Path, "jsonb_extract_path").with_aliases(["json_extract_path"]),
        JsonFunction::udf(Op::PathText, "jsonb_extract_path_text")
            .with_aliases(["json_extract_path_text"]),
        JsonFunction::udf(Op::BuildObject(B), "jsonb_build_object"),
        JsonFunction::udf(Op::BuildObject(J), "json_build_object"),
        JsonFunction::udf(Op::BuildArray(B), "jsonb_build_array"),
        JsonFunction::udf(Op::BuildArray(J), "json_build_array"),
        JsonFunction::udf(Op::To(B), "to_jsonb"),
        JsonFunction::udf(Op::To(J), "to_json"),
        input_udf(JsonKind::Json),
        input_udf(JsonKind::Jsonb),
    ]
}

impl ScalarUDFImpl for JsonFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Err(DataFusionError::Internal(
            "return_field_from_args is used".into(),
        ))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let input_kind = || {
            args.arg_fields
                .first()
                .and_then(|f| JsonKind::of(f))
                .unwrap_or(if self.name.starts_with("json_") {
                    JsonKind::Json
                } else {
                    JsonKind::Jsonb
                })
        };
        let text = || Arc::new(Field::new(self.name, DataType::Utf8, true));
        Ok(match self.op {
            Op::Input(kind) => {
                if let Some(from) = args.arg_fields.first() {
                    check_castable(from, kind)?;
                }
                kind.field(self.name)
            }
            Op::Get | Op::Path => input_kind().field(self.name),
            Op::GetText | Op::PathText | Op::TypeOf => text(),
            Op::Contains | Op::ContainedBy | Op::HasKey | Op::HasAnyKey | Op::HasAllKeys => {
                Arc::new(Field::new(self.name, DataType::Boolean, true))
            }
            Op::Concat => JsonKind::Jsonb.field(self.name),
            Op::ArrayLength => Arc::new(Field::new(self.name, DataType::Int32, true)),
            Op::BuildObject(kind) | Op::BuildArray(kind) | Op::To(kind) => kind.field(self.name),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<_>>()?;
        let out = self.evaluate(&arrays, &args.arg_fields, rows)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Only text (and JSON) can be read as JSON; PostgreSQL has no cast from
/// other types (`to_json` converts them).
fn check_castable(from: &Field, kind: JsonKind) -> Result<()> {
    match from.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => Ok(()),
        other => Err(external(WeirError::new(
            SqlState("42846"),
            format!(
                "cannot cast type {} to {}",
                crate::types::pg_type_name(other),
                kind.name()
            ),
        ))),
    }
}

/// The JSON text of row `i` of each text-typed argument.
struct Texts {
    values: StringArray,
}

impl Texts {
    fn new(array: &ArrayRef) -> Result<Self> {
        let values = cast(array, &DataType::Utf8)?;
        Ok(Texts {
            values: values.as_string::<i32>().clone(),
        })
    }

    fn get(&self, i: usize) -> Option<&str> {
        (!self.values.is_null(i)).then(|| self.values.value(i))
    }
}

/// A JSON argument's value in one row, with what its member texts need.
struct Doc<'a> {
    source: &'a str,
    value: Json,
    /// Whether member texts can be cut from `source` (a `json` value, or a
    /// stored `jsonb` value, which is in normal form already).
    as_written: bool,
}

impl<'a> Doc<'a> {
    fn read(source: &'a str, field: &Field) -> Result<Self> {
        let tagged = JsonKind::of(field);
        let value = parse(source, tagged.unwrap_or(JsonKind::Jsonb))?;
        Ok(match tagged {
            Some(_) => Doc {
                source,
                value,
                as_written: true,
            },
            None => Doc {
                source,
                value: value.into_jsonb(),
                as_written: false,
            },
        })
    }

    fn text_of(&self, v: &Json) -> String {
        if self.as_written {
            v.text(Some(self.source))
        } else {
            v.to_jsonb_text()
        }
    }

    fn as_text(&self, v: &Json) -> Option<String> {
        match &v.kind {
            Kind::Null => None,
            Kind::String(s) => Some(s.clone()),
            _ => Some(self.text_of(v)),
        }
    }
}

/// `text` parsed as a value of `kind`, or the error PostgreSQL gives.
fn parse(text: &str, kind: JsonKind) -> Result<Json> {
    value::parse(text).map_err(|e| external(parse_error(e, kind)))
}

fn parse_error(e: ParseError, kind: JsonKind) -> WeirError {
    match e {
        ParseError::Syntax(detail) => WeirError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type {}: {detail}", kind.name()),
        ),
        ParseError::TooDeep => WeirError::new(
            SqlState("54001"),
            format!(
                "stack depth limit exceeded: {} nests deeper than {} levels",
                kind.name(),
                value::MAX_DEPTH
            ),
        ),
        ParseError::OutOfRange => WeirError::new(
            SqlState::NUMERIC_OUT_OF_RANGE,
            "value overflows numeric format",
        ),
        ParseError::NulEscape => WeirError::new(
            SqlState("22P05"),
            "unsupported Unicode escape sequence: \\u0000 cannot be converted to text",
        ),
    }
}

fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl JsonFunction {
    fn evaluate(&self, arrays: &[ArrayRef], fields: &[FieldRef], rows: usize) -> Result<ArrayRef> {
        match self.op {
            Op::Input(kind) => {
                let texts = Texts::new(&arrays[0])?;
                text_rows(rows, |i| {
                    let Some(text) = texts.get(i) else {
                        return Ok(None);
                    };
                    let value = parse(text, kind)?;
                    Ok(Some(match kind {
                        JsonKind::Json => text.to_owned(),
                        JsonKind::Jsonb => value.into_jsonb().to_jsonb_text(),
                    }))
                })
            }
            Op::Get | Op::GetText => {
                let docs = Texts::new(&arrays[0])?;
                let key = Step::column(&arrays[1])?;
                let as_text = self.op == Op::GetText;
                text_rows(rows, |i| {
                    let (Some(source), Some(step)) = (docs.get(i), key.get(i)) else {
                        return Ok(None);
                    };
                    let doc = Doc::read(source, &fields[0])?;
                    let found = match step {
                        StepValue::Key(k) => doc.value.field(k),
                        StepValue::Index(n) => doc.value.element(n),
                    };
                    Ok(found.and_then(|v| {
                        if as_text {
                            doc.as_text(v)
                        } else {
                            Some(doc.text_of(v))
                        }
                    }))
                })
            }
            Op::Path | Op::PathText => {
                let docs = Texts::new(&arrays[0])?;
                let paths = Paths::new(&arrays[1..], self.variadic_path())?;
                let as_text = self.op == Op::PathText;
                text_rows(rows, |i| {
                    let (Some(source), Some(path)) = (docs.get(i), paths.get(i)?) else {
                        return Ok(None);
                    };
                    let doc = Doc::read(source, &fields[0])?;
                    let steps: Vec<&str> = path.iter().map(String::as_str).collect();
                    Ok(doc.value.path(&steps).and_then(|v| {
                        if as_text {
                            doc.as_text(v)
                        } else {
                            Some(doc.text_of(v))
                        }
                    }))
                })
            }
            Op::Contains | Op::ContainedBy => {
                let (left, right) = (Texts::new(&arrays[0])?, Texts::new(&arrays[1])?);
                bool_rows(rows, |i| {
                    let (Some(a), Some(b)) = (left.get(i), right.get(i)) else {
                        return Ok(None);
                    };
                    let (a, b) = (Doc::read(a, &fields[0])?, Doc::read(b, &fields[1])?);
                    Ok(Some(match self.op {
                        Op::Contains => a.value.contains(&b.value),
                        _ => b.value.contains(&a.value),
                    }))
                })
            }
            Op::HasKey => {
                let (docs, keys) = (Texts::new(&arrays[0])?, Texts::new(&arrays[1])?);
                bool_rows(rows, |i| {
                    let (Some(source), Some(key)) = (docs.get(i), keys.get(i)) else {
                        return Ok(None);
                    };
                    Ok(Some(Doc::read(source, &fields[0])?.value.has_key(key)))
                })
            }
            Op::HasAnyKey | Op::HasAllKeys => {
                let docs = Texts::new(&arrays[0])?;
                let keys = Paths::new(&arrays[1..2], false)?;
                bool_rows(rows, |i| {
                    let (Some(source), Some(keys)) = (docs.get(i), keys.get(i)?) else {
                        return Ok(None);
                    };
                    let doc = Doc::read(source, &fields[0])?;
                    Ok(Some(if self.op == Op::HasAnyKey {
                        keys.iter().any(|k| doc.value.has_key(k))
                    } else {
                        keys.iter().all(|k| doc.value.has_key(k))
                    }))
                })
            }
            Op::Concat => {
                let (left, right) = (Texts::new(&arrays[0])?, Texts::new(&arrays[1])?);
                text_rows(rows, |i| {
                    let (Some(a), Some(b)) = (left.get(i), right.get(i)) else {
                        return Ok(None);
                    };
                    let (a, b) = (Doc::read(a, &fields[0])?, Doc::read(b, &fields[1])?);
                    Ok(Some(concat(a.value, b.value).into_jsonb().to_jsonb_text()))
                })
            }
            Op::TypeOf => {
                let docs = Texts::new(&arrays[0])?;
                text_rows(rows, |i| {
                    let Some(source) = docs.get(i) else {
                        return Ok(None);
                    };
                    Ok(Some(
                        Doc::read(source, &fields[0])?.value.type_name().to_owned(),
                    ))
                })
            }
            Op::ArrayLength => {
                let docs = Texts::new(&arrays[0])?;
                let mut out = Int32Builder::with_capacity(rows);
                for i in 0..rows {
                    let Some(source) = docs.get(i) else {
                        out.append_null();
                        continue;
                    };
                    let doc = Doc::read(source, &fields[0])?;
                    match &doc.value.kind {
                        Kind::Array(items) => out.append_value(items.len() as i32),
                        _ => {
                            let what = if matches!(doc.value.kind, Kind::Object(_)) {
                                "an object"
                            } else {
                                "a scalar"
                            };
                            return Err(external(WeirError::new(
                                SqlState("22023"),
                                format!("cannot get array length of {what}"),
                            )));
                        }
                    }
                }
                Ok(Arc::new(out.finish()))
            }
            Op::BuildObject(kind) => {
                if !arrays.len().is_multiple_of(2) {
                    return Err(external(WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "argument list must have even number of elements",
                    )));
                }
                let columns = Columns::new(arrays, fields);
                text_rows(rows, |i| {
                    let mut members = Vec::with_capacity(arrays.len() / 2);
                    for pair in 0..arrays.len() / 2 {
                        let key = match columns.value(2 * pair, i)?.kind {
                            Kind::Null => {
                                return Err(external(WeirError::new(
                                    SqlState("22004"),
                                    format!("argument {}: key must not be null", 2 * pair + 1),
                                )))
                            }
                            Kind::String(s) | Kind::Number(s) => s,
                            other => Json::new(other).to_jsonb_text(),
                        };
                        members.push((key, columns.value(2 * pair + 1, i)?));
                    }
                    Ok(Some(write(Json::new(Kind::Object(members)), kind)))
                })
            }
            Op::BuildArray(kind) => {
                let columns = Columns::new(arrays, fields);
                text_rows(rows, |i| {
                    let items = (0..arrays.len())
                        .map(|c| columns.value(c, i))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Some(write(Json::new(Kind::Array(items)), kind)))
                })
            }
            Op::To(kind) => {
                let columns = Columns::new(arrays, fields);
                text_rows(rows, |i| {
                    if arrays[0].is_null(i) {
                        return Ok(None);
                    }
                    Ok(Some(write(columns.value(0, i)?, kind)))
                })
            }
        }
    }
}

/// `value` as the text of `kind`: `jsonb`'s normal form, or `json` as
/// PostgreSQL's builders write it (`{"a" : 1}`, members in order).
pub(super) fn write(value: Json, kind: JsonKind) -> String {
    match kind {
        JsonKind::Jsonb => value.into_jsonb().to_jsonb_text(),
        JsonKind::Json => {
            let mut out = String::new();
            write_json(&value, &mut out);
            out
        }
    }
}

/// `json`'s builder form: `" : "` after keys, `", "` between items.
fn write_json(value: &Json, out: &mut String) {
    match &value.kind {
        Kind::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Kind::Object(members) => {
            out.push('{');
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value::write_string(key, out);
                out.push_str(" : ");
                write_json(item, out);
            }
            out.push('}');
        }
        _ => value.write_jsonb(out),
    }
}

/// `a || b` for jsonb: objects merge (`b`'s members win), arrays
/// concatenate, and a scalar or object joins an array as one element.
fn concat(a: Json, b: Json) -> Json {
    let items = |v: Json| match v.kind {
        Kind::Array(items) => items,
        other => vec![Json::new(other)],
    };
    match (a.kind, b.kind) {
        (Kind::Object(mut left), Kind::Object(right)) => {
            left.extend(right);
            Json::new(Kind::Object(left))
        }
        (a, b) => {
            let mut all = items(Json::new(a));
            all.extend(items(Json::new(b)));
            Json::new(Kind::Array(all))
        }
    }
}

/// One output string per row from `row`.
fn text_rows(
    rows: usize,
    mut row: impl FnMut(usize) -> Result<Option<String>>,
) -> Result<ArrayRef> {
    let mut out = StringBuilder::with_capacity(rows, rows * 16);
    for i in 0..rows {
        out.append_option(row(i)?);
    }
    Ok(Arc::new(out.finish()))
}

/// One output boolean per row from `row`.
fn bool_rows(rows: usize, mut row: impl FnMut(usize) -> Result<Option<bool>>) -> Result<ArrayRef> {
    let mut out = BooleanBuilder::with_capacity(rows);
    for i in 0..rows {
        out.append_option(row(i)?);
    }
    Ok(Arc::new(out.finish()))
}

/// The right operand of `->`: keys (text) or indexes (integers).
enum Step {
    Keys(StringArray),
    Indexes(datafusion::arrow::array::Int64Array),
}

enum StepValue<'a> {
    Key(&'a str),
    Index(i64),
}

impl Step {
    fn column(array: &ArrayRef) -> Result<Self> {
        Ok(match array.data_type() {
            t if t.is_integer() => {
                let ints = cast(array, &DataType::Int64)?;
                Step::Indexes(ints.as_primitive::<Int64Type>().clone())
            }
            _ => Step::Keys(cast(array, &DataType::Utf8)?.as_string::<i32>().clone()),
        })
    }

    fn get(&self, i: usize) -> Option<StepValue<'_>> {
        match self {
            Step::Keys(keys) => (!keys.is_null(i)).then(|| StepValue::Key(keys.value(i))),
            Step::Indexes(ints) => (!ints.is_null(i)).then(|| StepValue::Index(ints.value(i))),
        }
    }
}

/// Text arrays given to `#>`, `?|` and `?&` (an array, or its text form
/// `'{a,b}'`), or the steps of `json[b]_extract_path` (one per argument).
enum Paths {
    Lists(ArrayRef),
    Literals(StringArray),
    Arguments(Vec<StringArray>),
}

impl Paths {
    fn new(arrays: &[ArrayRef], variadic: bool) -> Result<Self> {
        if variadic {
            return Ok(Paths::Arguments(
                arrays
                    .iter()
                    .map(|a| Ok(cast(a, &DataType::Utf8)?.as_string::<i32>().clone()))
                    .collect::<Result<_>>()?,
            ));
        }
        let array = &arrays[0];
        Ok(match array.data_type() {
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                Paths::Lists(cast(
                    array,
                    &DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
                )?)
            }
            _ => Paths::Literals(cast(array, &DataType::Utf8)?.as_string::<i32>().clone()),
        })
    }

    /// Row `i`'s steps; `None` where it is NULL (or holds a NULL step,
    /// which PostgreSQL's `#>` answers with NULL too).
    fn get(&self, i: usize) -> Result<Option<Vec<String>>> {
        Ok(match self {
            Paths::Lists(lists) => {
                let lists = lists.as_list::<i32>();
                if lists.is_null(i) {
                    return Ok(None);
                }
                let values = lists.value(i);
                let values = values.as_string::<i32>();
                values
                    .iter()
                    .map(|v| v.map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            }
            Paths::Literals(texts) => {
                if texts.is_null(i) {
                    return Ok(None);
                }
                Some(array_literal(texts.value(i))?)
            }
            Paths::Arguments(args) => args
                .iter()
                .map(|a| (!a.is_null(i)).then(|| a.value(i).to_owned()))
                .collect(),
        })
    }
}

/// The elements of a one-dimensional text array literal: `{a,"b c"}`.
fn array_literal(text: &str) -> Result<Vec<String>> {
    let malformed = || {
        external(WeirError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("malformed array literal: \"{text}\""),
        ))
    };
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(malformed)?;
    let mut items = Vec::new();
    if inner.trim().is_empty() {
        return Ok(items);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => item.push(chars.next().ok_or_else(malformed)?),
                    Some(c) => item.push(c),
                    None => return Err(malformed()),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                item.push(c);
                chars.next();
            }
            item = item.trim().to_owned();
            if item.is_empty() || item.contains(['{', '}', '"']) {
                return Err(malformed());
            }
        }
        items.push(item);
        match chars.next() {
            None => return Ok(items),
            Some(',') => continue,
            Some(_) => return Err(malformed()),
        }
    }
}

/// Arguments converted to JSON values as `to_json` converts them.
struct Columns<'a> {
    arrays: &'a [ArrayRef],
    fields: &'a [FieldRef],
}

impl<'a> Columns<'a> {
    fn new(arrays: &'a [ArrayRef], fields: &'a [FieldRef]) -> Self {
        Columns { arrays, fields }
    }

    fn value(&self, column: usize, row: usize) -> Result<Json> {
        to_json(&self.arrays[column], &self.fields[column], row)
    }
}

/// Row `i` of `array` as a JSON value, as PostgreSQL's `to_jsonb`
/// converts: numbers and booleans as themselves, JSON as its value, lists
/// as arrays, structs as objects, NaN and infinities and everything else
/// as strings (dates and times in ISO 8601).
pub(super) fn to_json(array: &ArrayRef, field: &Field, i: usize) -> Result<Json> {
    if array.is_null(i) {
        return Ok(Json::new(Kind::Null));
    }
    let number = |text: String| Ok(Json::new(Kind::Number(text)));
    match array.data_type() {
        DataType::Null => Ok(Json::new(Kind::Null)),
        DataType::Boolean => Ok(Json::new(Kind::Bool(array.as_boolean().value(i)))),
        t if t.is_integer() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
            number(display(array, i)?)
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let f = cast(&array.slice(i, 1), &DataType::Float64)?
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                .value(0);
            if f.is_finite() {
                let text = f.to_string();
                number(
                    value::parse(&text)
                        .map(|j| match j.kind {
                            Kind::Number(n) => n,
                            _ => text.clone(),
                        })
                        .unwrap_or(text),
                )
            } else {
                let name = if f.is_nan() {
                    "NaN"
                } else if f > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                };
                Ok(Json::new(Kind::String(name.to_owned())))
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = cast(&array.slice(i, 1), &DataType::Utf8)?;
            let text = text.as_string::<i32>().value(0);
            match JsonKind::of(field) {
                Some(kind) => parse(text, kind),
                None => Ok(Json::new(Kind::String(text.to_owned()))),
            }
        }
        DataType::List(inner) | DataType::LargeList(inner) => {
            let values = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(i),
                _ => array.as_list::<i64>().value(i),
            };
            let items = (0..values.len())
                .map(|j| to_json(&values, inner, j))
                .collect::<Result<Vec<_>>>()?;
            Ok(Json::new(Kind::Array(items)))
        }
        DataType::Struct(fields) => {
            let structs = array.as_struct();
            let members = fields
                .iter()
                .zip(structs.columns())
                .map(|(f, column)| Ok((f.name().clone(), to_json(column, f, i)?)))
                .collect::<Result<Vec<_>>>()?;
            Ok(Json::new(Kind::Object(members)))
        }
        _ => Ok(Json::new(Kind::String(display(array, i)?))),
    }
}

/// Arrow's text of one value (ISO 8601 for dates and times).
fn display(array: &ArrayRef, i: usize) -> Result<String> {
    let options = FormatOptions::default();
    let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
    Ok(formatter.value(i).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_literals_split_like_postgres() {
        assert_eq!(array_literal("{a,b}").unwrap(), ["a", "b"]);
        assert_eq!(
            array_literal("{ a , \"b c\",\"d\\\"\"}").unwrap(),
            ["a", "b c", "d\""]
        );
        assert!(array_literal("{}").unwrap().is_empty());
        assert!(array_literal("a,b").is_err());
        assert!(array_literal("{a,,b}").is_err());
    }

    #[test]
    fn concatenation_merges_objects_and_joins_arrays() {
        let j = |t: &str| value::parse(t).unwrap();
        let cat = |a: &str, b: &str| concat(j(a), j(b)).into_jsonb().to_jsonb_text();
        assert_eq!(cat(r#"{"a":1,"b":2}"#, r#"{"b":3}"#), r#"{"a": 1, "b": 3}"#);
        assert_eq!(cat("[1]", "[2,3]"), "[1, 2, 3]");
        assert_eq!(cat("[1]", r#"{"a":1}"#), r#"[1, {"a": 1}]"#);
        assert_eq!(cat("1", "2"), "[1, 2]");
    }
}
