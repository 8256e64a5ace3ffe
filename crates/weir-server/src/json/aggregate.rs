//! `json_agg`/`jsonb_agg` (an array of the group's values) and
//! `json_object_agg`/`jsonb_object_agg` (an object of its key-value
//! pairs). In a materialized view they are recomputed per touched group,
//! as every aggregate without a columnar accumulator is.

use std::sync::Arc;

use std::cmp::Ordering;

use datafusion::arrow::array::{ArrayRef, AsArray, ListArray, StructArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use super::convert::{write, write_builder, JsonColumn};
use super::scalar::{external, object_key};
use super::value::{self, Json, Kind};
use super::JsonKind;
use crate::error::{SqlState, WeirError};

/// One of the four aggregates.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonAggregate {
    name: &'static str,
    kind: JsonKind,
    /// Whether it builds an object from (key, value) pairs.
    object: bool,
    signature: Signature,
}

/// The aggregates, ready to register.
pub fn functions() -> Vec<AggregateUDF> {
    [
        ("jsonb_agg", JsonKind::Jsonb, false),
        ("json_agg", JsonKind::Json, false),
        ("jsonb_object_agg", JsonKind::Jsonb, true),
        ("json_object_agg", JsonKind::Json, true),
    ]
    .into_iter()
    .map(|(name, kind, object)| {
        AggregateUDF::from(JsonAggregate {
            name,
            kind,
            object,
            signature: Signature::any(if object { 2 } else { 1 }, Volatility::Immutable),
        })
    })
    .collect()
}

impl AggregateUDFImpl for JsonAggregate {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field(&self, _arg_fields: &[FieldRef]) -> Result<FieldRef> {
        Ok(self.kind.field(self.name))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let mut fields = vec![Arc::new(Field::new(
            format!("{}[partial]", args.name),
            DataType::Utf8,
            true,
        ))];
        if !args.ordering_fields.is_empty() {
            fields.push(Arc::new(Field::new_list(
                format!("{}[orderings]", args.name),
                Field::new_list_field(
                    DataType::Struct(
                        args.ordering_fields
                            .iter()
                            .enumerate()
                            .map(|(i, field)| ordering_field(i, field))
                            .collect(),
                    ),
                    true,
                ),
                true,
            )));
        }
        Ok(fields)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let ordering = args
            .order_bys
            .iter()
            .enumerate()
            .map(|(i, sort)| {
                let field = sort.expr.return_field(args.schema)?;
                Ok((ordering_field(i, &field), sort.options))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(Collect {
            kind: self.kind,
            object: self.object,
            fields: args.expr_fields.to_vec(),
            ordering,
            items: Vec::new(),
            bytes: 0,
        }))
    }
}

/// The field of the `i`th `ORDER BY` key in the state's list of keys: the
/// same in the declared state and in the accumulator's (a key DataFusion
/// knows to be non-null is still a nullable field there).
fn ordering_field(i: usize, key: &Field) -> FieldRef {
    Arc::new(Field::new(format!("o{i}"), key.data_type().clone(), true))
}

/// The values (or members) of one group, in input order, each with its
/// `ORDER BY` values when the call has one.
#[derive(Debug)]
struct Collect {
    kind: JsonKind,
    object: bool,
    /// The fields of the arguments.
    fields: Vec<FieldRef>,
    /// The `ORDER BY` keys' fields and directions.
    ordering: Vec<(FieldRef, SortOptions)>,
    items: Vec<Item>,
    /// Bytes the items hold, roughly.
    bytes: usize,
}

/// One value of a group: its key (objects only), value and sort keys.
#[derive(Debug, Clone)]
struct Item {
    key: String,
    value: Json,
    order: Vec<ScalarValue>,
}

impl Collect {
    fn push(&mut self, item: Item) {
        self.bytes += item.key.len() + approximate_size(&item.value) + 48;
        self.items.push(item);
    }

    /// Puts the items in `ORDER BY` order (stable: ties keep input order).
    fn sort(&mut self) {
        if self.ordering.is_empty() {
            return;
        }
        let options: Vec<SortOptions> = self.ordering.iter().map(|(_, o)| *o).collect();
        self.items.sort_by(|a, b| {
            for ((x, y), o) in a.order.iter().zip(&b.order).zip(&options) {
                let ordering = match (x.is_null(), y.is_null()) {
                    (true, true) => Ordering::Equal,
                    (true, false) if o.nulls_first => Ordering::Less,
                    (true, false) => Ordering::Greater,
                    (false, true) if o.nulls_first => Ordering::Greater,
                    (false, true) => Ordering::Less,
                    (false, false) => {
                        let natural = x.partial_cmp(y).unwrap_or(Ordering::Equal);
                        if o.descending {
                            natural.reverse()
                        } else {
                            natural
                        }
                    }
                };
                if ordering != Ordering::Equal {
                    return ordering;
                }
            }
            Ordering::Equal
        });
    }

    /// The group's value so far, as JSON (an object or an array).
    fn value(&self) -> Json {
        if self.object {
            Json::new(Kind::Object(
                self.items
                    .iter()
                    .map(|i| (i.key.clone(), i.value.clone()))
                    .collect(),
            ))
        } else {
            Json::new(Kind::Array(
                self.items.iter().map(|i| i.value.clone()).collect(),
            ))
        }
    }

    /// The items' sort keys as one list of structs (the second state
    /// column).
    fn ordering_state(&self) -> Result<ScalarValue> {
        let fields: Fields = self.ordering.iter().map(|(f, _)| f.clone()).collect();
        let columns = (0..fields.len())
            .map(|k| {
                if self.items.is_empty() {
                    return Ok(datafusion::arrow::array::new_empty_array(
                        fields[k].data_type(),
                    ));
                }
                ScalarValue::iter_to_array(self.items.iter().map(|i| i.order[k].clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let structs = StructArray::try_new(fields.clone(), columns, None)?;
        let list = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Struct(fields), true)),
            OffsetBuffer::from_lengths([self.items.len()]),
            Arc::new(structs),
            None,
        );
        Ok(ScalarValue::List(Arc::new(list)))
    }
}

fn null_key() -> DataFusionError {
    external(WeirError::new(
        SqlState("22004"),
        "field name must not be null",
    ))
}

/// Bytes a value holds, roughly (for the accumulator's memory account).
fn approximate_size(value: &Json) -> usize {
    std::mem::size_of::<Json>()
        + match &value.kind {
            Kind::Null | Kind::Bool(_) => 0,
            Kind::Number(text) | Kind::String(text) => text.len(),
            Kind::Array(items) => items.iter().map(approximate_size).sum(),
            Kind::Object(members) => members
                .iter()
                .map(|(key, item)| key.len() + approximate_size(item))
                .sum(),
        }
}

impl Accumulator for Collect {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let rows = values.first().map_or(0, |v| v.len());
        let arguments = if self.object { 2 } else { 1 };
        let columns = values[..arguments]
            .iter()
            .zip(&self.fields)
            .map(|(array, field)| JsonColumn::new(array, field))
            .collect::<Result<Vec<_>>>()?;
        let order_columns = &values[arguments..];
        for i in 0..rows {
            let (key, value) = match columns.as_slice() {
                [keys, values] => (object_key(keys.value(i)?, null_key)?, values.value(i)?),
                [values] => (String::new(), values.value(i)?),
                _ => return Err(DataFusionError::Internal("json aggregate arguments".into())),
            };
            let order = order_columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, i))
                .collect::<Result<Vec<_>>>()?;
            self.push(Item { key, value, order });
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let partials = states[0].as_string::<i32>();
        let orderings = states.get(1).map(|s| s.as_list::<i32>());
        for (row, partial) in partials.iter().enumerate() {
            let Some(partial) = partial else { continue };
            let parsed = value::parse(partial)
                .map_err(|e| DataFusionError::Internal(format!("json partial state: {e:?}")))?;
            let members = match parsed.kind {
                Kind::Array(items) => items.into_iter().map(|v| (String::new(), v)).collect(),
                Kind::Object(members) => members,
                _ => {
                    return Err(DataFusionError::Internal(
                        "json partial state is not an array or object".into(),
                    ))
                }
            };
            let keys = orderings.map(|lists| lists.value(row));
            for (n, (key, value)) in members.into_iter().enumerate() {
                let order = match &keys {
                    Some(keys) => {
                        let keys = keys.as_struct();
                        keys.columns()
                            .iter()
                            .map(|c| ScalarValue::try_from_array(c, n))
                            .collect::<Result<Vec<_>>>()?
                    }
                    None => Vec::new(),
                };
                self.push(Item {
                    key,
                    value: Json::new(value.kind),
                    order,
                });
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        // Members in order, duplicates kept: the `json` form.
        self.sort();
        let partial = ScalarValue::Utf8(
            (!self.items.is_empty()).then(|| write_builder(&self.value(), false)),
        );
        if self.ordering.is_empty() {
            return Ok(vec![partial]);
        }
        Ok(vec![partial, self.ordering_state()?])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.sort();
        if self.items.is_empty() {
            return Ok(ScalarValue::Utf8(None));
        }
        let text = match self.kind {
            JsonKind::Jsonb => write(self.value(), JsonKind::Jsonb),
            // PostgreSQL writes json_object_agg as `{ "a" : 1, "b" : 2 }`.
            JsonKind::Json => write_builder(&self.value(), self.object),
        };
        Ok(ScalarValue::Utf8(Some(text)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.bytes
    }
}
