//! Scalar JSON functions: input, the operators, and the functions that
//! build and inspect values. One [`JsonFunction`] per [`Op`].
//!
//! An argument that is one value for every row (a literal: the right side
//! of `body @> '{"a":1}'`, a path `'{a,b}'`) is read and parsed once per
//! batch, not once per row.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, Int64Array, StringArray, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};

use super::convert::{write, JsonColumn};
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
    /// `#>`: the value at a path given as a text array.
    Path,
    /// `#>>`: the same, as text.
    PathText,
    /// `json[b]_extract_path`: the value at a path given step by step.
    ExtractPath(JsonKind),
    /// `json[b]_extract_path_text`: the same, as text.
    ExtractPathText,
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

impl Op {
    /// The function's name: its SQL name, or for an operator or input
    /// the name it shows in plans.
    fn name(self) -> &'static str {
        use JsonKind::{Json as J, Jsonb as B};
        match self {
            Op::Input(J) => "weir_json_in",
            Op::Input(B) => "weir_jsonb_in",
            Op::Get => "weir_json_get",
            Op::GetText => "weir_json_get_text",
            Op::Path => "weir_json_path",
            Op::PathText => "weir_json_path_text",
            Op::ExtractPath(J) => "json_extract_path",
            Op::ExtractPath(B) => "jsonb_extract_path",
            Op::ExtractPathText => "jsonb_extract_path_text",
            Op::Contains => "weir_json_contains",
            Op::ContainedBy => "weir_json_contained_by",
            Op::HasKey => "weir_json_has_key",
            Op::HasAnyKey => "weir_json_has_any_key",
            Op::HasAllKeys => "weir_json_has_all_keys",
            Op::Concat => "weir_jsonb_concat",
            Op::TypeOf => "jsonb_typeof",
            Op::ArrayLength => "jsonb_array_length",
            Op::BuildObject(J) => "json_build_object",
            Op::BuildObject(B) => "jsonb_build_object",
            Op::BuildArray(J) => "json_build_array",
            Op::BuildArray(B) => "jsonb_build_array",
            Op::To(J) => "to_json",
            Op::To(B) => "to_jsonb",
        }
    }

    fn signature(self) -> Signature {
        match self {
            Op::Input(_) | Op::TypeOf | Op::ArrayLength | Op::To(_) => {
                Signature::any(1, Volatility::Immutable)
            }
            Op::BuildObject(_) | Op::BuildArray(_) => Signature::one_of(
                vec![TypeSignature::VariadicAny, TypeSignature::Nullary],
                Volatility::Immutable,
            ),
            Op::ExtractPath(_) | Op::ExtractPathText => {
                Signature::variadic_any(Volatility::Immutable)
            }
            _ => Signature::any(2, Volatility::Immutable),
        }
    }

    /// The kind a JSON argument is read as when its field has none (a
    /// text literal given to a function).
    fn default_kind(self) -> JsonKind {
        match self {
            Op::ExtractPath(kind) => kind,
            _ => JsonKind::Jsonb,
        }
    }
}

/// A scalar function doing one [`Op`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonFunction {
    op: Op,
    signature: Signature,
}

impl JsonFunction {
    /// The function doing `op` (operators are planned as these).
    pub fn udf(op: Op) -> ScalarUDF {
        ScalarUDF::from(JsonFunction {
            op,
            signature: op.signature(),
        })
    }
}

/// Every SQL-callable function of this module.
pub fn functions() -> Vec<ScalarUDF> {
    use JsonKind::{Json as J, Jsonb as B};
    let mut functions: Vec<ScalarUDF> = [J, B]
        .into_iter()
        .flat_map(|kind| {
            [
                Op::ExtractPath(kind),
                Op::BuildObject(kind),
                Op::BuildArray(kind),
                Op::To(kind),
            ]
        })
        .map(JsonFunction::udf)
        .collect();
    functions.push(JsonFunction::udf(Op::TypeOf).with_aliases(["json_typeof"]));
    functions.push(JsonFunction::udf(Op::ArrayLength).with_aliases(["json_array_length"]));
    functions.push(JsonFunction::udf(Op::ExtractPathText).with_aliases(["json_extract_path_text"]));
    functions
}

impl ScalarUDFImpl for JsonFunction {
    fn name(&self) -> &str {
        self.op.name()
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
        let name = self.op.name();
        let input_kind = || {
            args.arg_fields
                .first()
                .and_then(|f| JsonKind::of(f))
                .unwrap_or(self.op.default_kind())
        };
        let typed = |t: DataType| Arc::new(Field::new(name, t, true));
        Ok(match self.op {
            Op::Input(kind) => {
                if let Some(from) = args.arg_fields.first() {
                    check_castable(from, kind)?;
                }
                kind.field(name)
            }
            Op::Get | Op::Path | Op::ExtractPath(_) => input_kind().field(name),
            Op::GetText | Op::PathText | Op::ExtractPathText | Op::TypeOf => typed(DataType::Utf8),
            Op::Contains | Op::ContainedBy | Op::HasKey | Op::HasAnyKey | Op::HasAllKeys => {
                typed(DataType::Boolean)
            }
            Op::Concat => JsonKind::Jsonb.field(name),
            Op::ArrayLength => typed(DataType::Int32),
            Op::BuildObject(kind) | Op::BuildArray(kind) | Op::To(kind) => kind.field(name),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { args.number_rows };
        let arguments = args
            .args
            .iter()
            .zip(&args.arg_fields)
            .map(|(value, field)| Arg::new(value, field))
            .collect::<Result<Vec<_>>>()?;
        let out = self.evaluate(&arguments, rows)?;
        Ok(if all_scalar {
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
        _ => Err(external(WeirError::new(
            SqlState("42846"),
            format!(
                "cannot cast type {} to {}",
                crate::types::pg_field_type_name(from),
                kind.name()
            ),
        ))),
    }
}

/// `text` parsed as a value of `kind`, or the error PostgreSQL gives.
pub(super) fn parse(text: &str, kind: JsonKind) -> Result<Json> {
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

pub(super) fn external(e: WeirError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// One argument of a call: its values (one, for a scalar) and field.
struct Arg {
    array: ArrayRef,
    field: FieldRef,
    scalar: bool,
}

impl Arg {
    fn new(value: &ColumnarValue, field: &FieldRef) -> Result<Self> {
        let (array, scalar) = match value {
            ColumnarValue::Array(array) => (array.clone(), false),
            ColumnarValue::Scalar(value) => (value.to_array()?, true),
        };
        Ok(Arg {
            array,
            field: field.clone(),
            scalar,
        })
    }

    fn texts(&self) -> Result<Texts> {
        Ok(Texts {
            values: cast(&self.array, &DataType::Utf8)?
                .as_string::<i32>()
                .clone(),
            scalar: self.scalar,
        })
    }
}

/// Which value of an argument row `i` reads: its own, or a scalar's one.
fn row_of(scalar: bool, i: usize) -> usize {
    if scalar {
        0
    } else {
        i
    }
}

/// The text of an argument, by row.
struct Texts {
    values: StringArray,
    scalar: bool,
}

impl Texts {
    fn get(&self, i: usize) -> Option<&str> {
        let i = row_of(self.scalar, i);
        (!self.values.is_null(i)).then(|| self.values.value(i))
    }
}

/// A JSON value read from an argument's text, with what its members'
/// texts need.
struct Doc<'a> {
    source: &'a str,
    value: Json,
    /// Whether member texts can be cut from `source` (a `json` value, or a
    /// stored `jsonb` value, which is in normal form already).
    as_written: bool,
}

impl<'a> Doc<'a> {
    fn read(source: &'a str, field: &Field, default_kind: JsonKind) -> Result<Self> {
        let tagged = JsonKind::of(field);
        let value = parse(source, tagged.unwrap_or(default_kind))?;
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

    /// `v` as the operators give it: its JSON text, or with `as_text` a
    /// string unquoted and `null` as NULL (`->>`).
    fn output(&self, v: &Json, as_text: bool) -> Option<String> {
        match &v.kind {
            Kind::Null if as_text => None,
            Kind::String(s) if as_text => Some(s.clone()),
            _ => Some(self.text_of(v)),
        }
    }
}

/// A JSON argument's values by row; a scalar's parsed once.
struct Docs<'a> {
    texts: &'a Texts,
    field: &'a Field,
    default_kind: JsonKind,
    constant: Option<Option<Doc<'a>>>,
}

impl<'a> Docs<'a> {
    fn new(texts: &'a Texts, field: &'a Field, default_kind: JsonKind) -> Result<Self> {
        let mut docs = Docs {
            texts,
            field,
            default_kind,
            constant: None,
        };
        if texts.scalar {
            docs.constant = Some(docs.read(0)?);
        }
        Ok(docs)
    }

    fn read(&self, i: usize) -> Result<Option<Doc<'a>>> {
        self.texts
            .get(i)
            .map(|source| Doc::read(source, self.field, self.default_kind))
            .transpose()
    }

    /// `f` of row `i`'s value; `None` where it is NULL.
    fn with<T>(&self, i: usize, f: impl FnOnce(&Doc) -> T) -> Result<Option<T>> {
        Ok(match &self.constant {
            Some(constant) => constant.as_ref().map(f),
            None => self.read(i)?.as_ref().map(f),
        })
    }
}

impl JsonFunction {
    fn evaluate(&self, args: &[Arg], rows: usize) -> Result<ArrayRef> {
        let default_kind = self.op.default_kind();
        match self.op {
            Op::Input(kind) => {
                let texts = args[0].texts()?;
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
                let texts = args[0].texts()?;
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                let key = Step::new(&args[1])?;
                let as_text = self.op == Op::GetText;
                text_rows(rows, |i| {
                    let Some(step) = key.get(i) else {
                        return Ok(None);
                    };
                    Ok(docs
                        .with(i, |doc| {
                            let found = match step {
                                StepValue::Key(k) => doc.value.field(k),
                                StepValue::Index(n) => doc.value.element(n),
                            };
                            found.and_then(|v| doc.output(v, as_text))
                        })?
                        .flatten())
                })
            }
            Op::Path | Op::PathText | Op::ExtractPath(_) | Op::ExtractPathText => {
                let texts = args[0].texts()?;
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                let paths = match self.op {
                    Op::Path | Op::PathText => Paths::array(&args[1])?,
                    _ => Paths::steps(&args[1..])?,
                };
                let as_text = matches!(self.op, Op::PathText | Op::ExtractPathText);
                text_rows(rows, |i| {
                    let Some(path) = paths.get(i)? else {
                        return Ok(None);
                    };
                    let steps: Vec<&str> = path.iter().map(String::as_str).collect();
                    Ok(docs
                        .with(i, |doc| {
                            doc.value.path(&steps).and_then(|v| doc.output(v, as_text))
                        })?
                        .flatten())
                })
            }
            Op::Contains | Op::ContainedBy => {
                let (left, right) = (args[0].texts()?, args[1].texts()?);
                let left = Docs::new(&left, &args[0].field, default_kind)?;
                let right = Docs::new(&right, &args[1].field, default_kind)?;
                let (outer, inner) = match self.op {
                    Op::Contains => (&left, &right),
                    _ => (&right, &left),
                };
                bool_rows(rows, |i| {
                    Ok(outer
                        .with(i, |a| inner.with(i, |b| a.value.contains(&b.value)))?
                        .transpose()?
                        .flatten())
                })
            }
            Op::HasKey => {
                let (texts, keys) = (args[0].texts()?, args[1].texts()?);
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                bool_rows(rows, |i| {
                    let Some(key) = keys.get(i) else {
                        return Ok(None);
                    };
                    docs.with(i, |doc| doc.value.has_key(key))
                })
            }
            Op::HasAnyKey | Op::HasAllKeys => {
                let texts = args[0].texts()?;
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                let keys = Paths::array(&args[1])?;
                let any = self.op == Op::HasAnyKey;
                bool_rows(rows, |i| {
                    let Some(keys) = keys.get(i)? else {
                        return Ok(None);
                    };
                    docs.with(i, |doc| {
                        if any {
                            keys.iter().any(|k| doc.value.has_key(k))
                        } else {
                            keys.iter().all(|k| doc.value.has_key(k))
                        }
                    })
                })
            }
            Op::Concat => {
                let (left, right) = (args[0].texts()?, args[1].texts()?);
                let left = Docs::new(&left, &args[0].field, default_kind)?;
                let right = Docs::new(&right, &args[1].field, default_kind)?;
                text_rows(rows, |i| {
                    Ok(left
                        .with(i, |a| {
                            right.with(i, |b| {
                                concat(a.value.clone(), b.value.clone())
                                    .into_jsonb()
                                    .to_jsonb_text()
                            })
                        })?
                        .transpose()?
                        .flatten())
                })
            }
            Op::TypeOf => {
                let texts = args[0].texts()?;
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                text_rows(rows, |i| {
                    docs.with(i, |doc| doc.value.type_name().to_owned())
                })
            }
            Op::ArrayLength => {
                let texts = args[0].texts()?;
                let docs = Docs::new(&texts, &args[0].field, default_kind)?;
                let mut out = Int32Builder::with_capacity(rows);
                for i in 0..rows {
                    let length = docs.with(i, |doc| match &doc.value.kind {
                        Kind::Array(items) => Ok(items.len() as i32),
                        Kind::Object(_) => Err(no_array_length("an object")),
                        _ => Err(no_array_length("a scalar")),
                    })?;
                    out.append_option(length.transpose()?);
                }
                Ok(Arc::new(out.finish()))
            }
            Op::BuildObject(kind) => {
                if !args.len().is_multiple_of(2) {
                    return Err(external(WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        "argument list must have even number of elements",
                    )));
                }
                let columns = json_columns(args)?;
                text_rows(rows, |i| {
                    let members = columns
                        .chunks(2)
                        .enumerate()
                        .map(|(pair, kv)| {
                            let key = object_key(kv[0].value(i)?, || {
                                external(WeirError::new(
                                    SqlState("22004"),
                                    format!("argument {}: key must not be null", 2 * pair + 1),
                                ))
                            })?;
                            Ok((key, kv[1].value(i)?))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Some(write(Json::new(Kind::Object(members)), kind)))
                })
            }
            Op::BuildArray(kind) => {
                let columns = json_columns(args)?;
                text_rows(rows, |i| {
                    let items = columns
                        .iter()
                        .map(|c| c.value(i))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(Some(write(Json::new(Kind::Array(items)), kind)))
                })
            }
            Op::To(kind) => {
                let columns = json_columns(args)?;
                text_rows(rows, |i| {
                    if columns[0].is_null(i) {
                        return Ok(None);
                    }
                    Ok(Some(write(columns[0].value(i)?, kind)))
                })
            }
        }
    }
}

fn no_array_length(what: &str) -> DataFusionError {
    external(WeirError::new(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("cannot get array length of {what}"),
    ))
}

/// The arguments as JSON columns, each read at its own row (a scalar's
/// at its one value).
fn json_columns(args: &[Arg]) -> Result<Vec<ScalarOrColumn>> {
    args.iter()
        .map(|a| {
            Ok(ScalarOrColumn {
                column: JsonColumn::new(&a.array, &a.field)?,
                scalar: a.scalar,
            })
        })
        .collect()
}

/// A [`JsonColumn`] of an argument, read at row 0 when it is a scalar.
struct ScalarOrColumn {
    column: JsonColumn,
    scalar: bool,
}

impl ScalarOrColumn {
    fn value(&self, i: usize) -> Result<Json> {
        self.column.value(row_of(self.scalar, i))
    }

    fn is_null(&self, i: usize) -> bool {
        self.column.is_null(row_of(self.scalar, i))
    }
}

/// An object key from a JSON value, as PostgreSQL's builders take it:
/// strings and numbers as their text, anything else as its JSON; NULL is
/// the error `null_key` makes.
pub(super) fn object_key(key: Json, null_key: impl FnOnce() -> DataFusionError) -> Result<String> {
    Ok(match key.kind {
        Kind::Null => return Err(null_key()),
        Kind::String(s) | Kind::Number(s) => s,
        other => Json::new(other).to_jsonb_text(),
    })
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
struct Step {
    values: StepValues,
    scalar: bool,
}

enum StepValues {
    Keys(StringArray),
    Indexes(Int64Array),
}

enum StepValue<'a> {
    Key(&'a str),
    Index(i64),
}

impl Step {
    fn new(arg: &Arg) -> Result<Self> {
        let values = if arg.array.data_type().is_integer() {
            StepValues::Indexes(
                cast(&arg.array, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            )
        } else {
            StepValues::Keys(
                cast(&arg.array, &DataType::Utf8)?
                    .as_string::<i32>()
                    .clone(),
            )
        };
        Ok(Step {
            values,
            scalar: arg.scalar,
        })
    }

    fn get(&self, i: usize) -> Option<StepValue<'_>> {
        let i = row_of(self.scalar, i);
        match &self.values {
            StepValues::Keys(keys) => (!keys.is_null(i)).then(|| StepValue::Key(keys.value(i))),
            StepValues::Indexes(ints) => {
                (!ints.is_null(i)).then(|| StepValue::Index(ints.value(i)))
            }
        }
    }
}

/// Text arrays given to `#>`, `?|` and `?&` (an array, or its text form
/// `'{a,b}'`), or the steps of `json[b]_extract_path` (one per argument).
/// A constant is read once.
enum Paths {
    Constant(Option<Vec<String>>),
    Lists(ArrayRef),
    Literals(StringArray),
    Arguments(Vec<Texts>),
}

impl Paths {
    fn array(arg: &Arg) -> Result<Self> {
        let paths = match arg.array.data_type() {
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                Paths::Lists(cast(
                    &arg.array,
                    &DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
                )?)
            }
            _ => Paths::Literals(
                cast(&arg.array, &DataType::Utf8)?
                    .as_string::<i32>()
                    .clone(),
            ),
        };
        Ok(if arg.scalar {
            Paths::Constant(paths.get(0)?)
        } else {
            paths
        })
    }

    fn steps(args: &[Arg]) -> Result<Self> {
        Ok(Paths::Arguments(
            args.iter().map(Arg::texts).collect::<Result<_>>()?,
        ))
    }

    /// Row `i`'s steps; `None` where it is NULL (or holds a NULL step,
    /// which PostgreSQL answers with NULL too).
    fn get(&self, i: usize) -> Result<Option<Vec<String>>> {
        Ok(match self {
            Paths::Constant(path) => path.clone(),
            Paths::Lists(lists) => {
                let lists = lists.as_list::<i32>();
                if lists.is_null(i) {
                    return Ok(None);
                }
                let values = lists.value(i);
                values
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.map(str::to_owned))
                    .collect()
            }
            Paths::Literals(texts) => {
                if texts.is_null(i) {
                    return Ok(None);
                }
                Some(array_literal(texts.value(i))?)
            }
            Paths::Arguments(args) => args.iter().map(|a| a.get(i).map(str::to_owned)).collect(),
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
